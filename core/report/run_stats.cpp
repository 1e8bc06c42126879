#include "report/run_stats.hpp"

#include "runtime/tensors.hpp"
#include "runtime/error.hpp"
#include "runtime/json.hpp"
#include "runtime/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace zf {

void RunStats::count_batch(int64_t samples, int64_t tokens) {
  samples_ += samples;
  tokens_ += tokens;
  tokens_total_ += tokens;
}

void RunStats::mark(const std::string &phase, double at) {
  double now = at >= 0 ? at : process_seconds();
  phases_.emplace_back(phase, now - last_mark_);
  last_mark_ = now;
}

std::string RunStats::phases() const {
  std::string parts;
  for (const auto &[phase, seconds] : phases_) parts += format("%s%s %.1f s", parts.empty() ? "" : ", ", phase.c_str(), seconds);
  return format("%.1f s (%s)", last_mark_, parts.c_str());
}

void RunStats::note_device_memory(const char *point) {
  if (runtime_.device != ZF_DEVICE_CUDA) return;
  const uint64_t allocated = device_memory().allocated;
  for (auto &[name, bytes] : allocated_at_)
    if (name == point) {
      bytes = std::max(bytes, allocated);
      return;
    }
  allocated_at_.emplace_back(point, allocated);
}

StepRecord RunStats::record(int64_t step, int64_t steps, double loss, double step_ms, int64_t grad_accum) {
  StepRecord r;
  r.step = step;
  r.steps = steps;
  r.loss = loss;
  r.aux_loss = aux_loss;
  r.step_ms = step_ms;
  double seconds = step_ms / 1000.0;
  double world = double(runtime_.comm->world_size());
  r.samples_per_s = seconds > 0 ? double(samples_) * world / seconds : 0;
  r.tokens_per_s = seconds > 0 ? double(tokens_) * world / seconds : 0;
  samples_ = tokens_ = 0;
  for (const auto &[name, ms] : runtime_.timers.snapshot()) {
    r.timers_ms.emplace_back(name, ms);
    bool per_micro = name == "fwd" || name == "bwd" || name == "bwd_inner";
    if (name == "fwd" || name == "bwd" || name == "bwd_inner" || name == "bwd_reduce" || name == "step")
      r.timers_ms.emplace_back(name + "_microstep", per_micro ? ms / double(grad_accum) : ms);
  }
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) r.memory[tier] = runtime_.memory.current(tier);
  if (runtime_.device == ZF_DEVICE_CUDA) {  // the caching allocator's view: tensors of the step plus the ledger's blocks
    DeviceMemory gpu = device_memory();
    r.device_allocated_peak = gpu.allocated_peak;
    r.device_reserved_peak = gpu.reserved_peak;
    device_peak_.allocated_peak = std::max(device_peak_.allocated_peak, gpu.allocated_peak);
    device_peak_.reserved_peak = std::max(device_peak_.reserved_peak, gpu.reserved_peak);
    reset_device_memory_peak();
  }
  for (const auto &[name, ms] : r.timers_ms) timer_totals_[name] += ms;
  return r;
}

std::string RunStats::summary_json(const RunSummary &s, int64_t timed_steps, const Facts &facts) const {
  const Communicator &comm = *runtime_.comm;
  const MemoryLedger &ledger = runtime_.memory;
  double seconds = s.mean_step_ms / 1000.0;
  JsonWriter json;
  json.begin_object();
  json.key("config").value(facts.config_file);
  json.key("model").value(facts.model);
  json.key("steps").value(s.steps);
  json.key("first_step").value(s.first_step);
  json.key("stop_signal").value(s.stop_signal);
  json.key("world_size").value(comm.world_size());
  json.key("communicator").value(comm.name());
  json.key("samples_per_step").value(facts.samples_per_step);
  json.key("initial_loss").value(s.initial_loss);
  json.key("final_loss").value(s.final_loss);
  if (facts.has_eval) json.key("eval_loss").value(s.eval_loss);
  json.key("timed_steps").value(timed_steps);
  json.key("mean_step_ms").value(s.mean_step_ms);
  json.key("samples_per_s").value(seconds > 0 ? double(facts.samples_per_step) / seconds : 0.0);
  json.key("tokens_per_s").value(seconds > 0 && s.steps > 0 ? double(tokens_total_) / double(s.steps - s.first_step + 1) *
                                                                  double(comm.world_size()) / seconds
                                                            : 0.0);
  json.key("selected_column_fraction").value(selected_fraction);
  for (const auto &[name, value] : update_facts) json.key(name).value(value);
  if (!param_gathers.empty()) {
    json.key("param_gathers").begin_object();
    for (const auto &[block, count] : param_gathers) json.key(block).value(count);
    json.end_object();
  }
  json.key("process_seconds").begin_object();  // outside the steps' timers: start-up, the loop, the digest
  for (const auto &[phase, seconds] : phases_) json.key(phase).value(seconds);
  json.end_object();
  json.key("mean_timers_ms").begin_object();
  for (const auto &[name, total] : timer_totals_) json.key(name).value(total / double(s.steps));
  json.end_object();
  json.key("peak_memory_bytes").begin_object();
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) json.key(tier_name(tier)).value(ledger.peak(tier));
  json.end_object();
  if (runtime_.device == ZF_DEVICE_CUDA) {
    json.key("gpu_memory_bytes").begin_object();
    json.key("allocated_peak").value(device_peak_.allocated_peak).key("reserved_peak").value(device_peak_.reserved_peak);
    json.key("ledger_device_peak").value(ledger.peak(ZF_TIER_DEVICE));
    json.key("allocated_at").begin_object();
    for (const auto &[point, bytes] : allocated_at_) json.key(point).value(bytes);
    json.end_object().end_object();
  }
  for (zf_tier tier : {ZF_TIER_DEVICE, ZF_TIER_PINNED_HOST, ZF_TIER_HOST})  // the memory plan, this rank
    json.key(format("planned_%s_bytes", tier_name(tier))).value(facts.memory_plan->bytes(tier));
  // This rank's ledger, "tier.tag": bytes at the end of the run, and the most each tag held at once.
  for (bool peak : {false, true}) {
    json.key(peak ? "memory_peak_bytes" : "memory_bytes").begin_object();
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
      for (const auto &[tag, bytes] : peak ? ledger.peak_by_tag(tier) : ledger.current_by_tag(tier))
        json.key(std::string(tier_name(tier)) + "." + tag).value(bytes);
    json.end_object();
  }
  json.key("plugins").begin_object();
  const PluginSet &plugins = *facts.plugins;
  for (const PluginOfKind *p : std::initializer_list<const PluginOfKind *>{&plugins.stage, &plugins.offload,
                                                                           &plugins.optimizer, &plugins.selector}) {
    const zf_descriptor &d = *p->file().descriptor;
    json.key(kind_name(d.kind)).begin_object();
    json.key("name").value(d.name).key("version").value(d.version ? d.version : "");
    json.key("path").value(p->file().path.string());
    json.end_object();
  }
  json.end_object();
  json.key("param_digest").value(s.param_digest);
  json.end_object();
  return json.str();
}

void print_run_start(const Runtime &runtime, const std::string &model, const zf_layout &layout, torch::Dtype dtype,
                     const PluginSet &plugins) {
  const Communicator &comm = *runtime.comm;
  if (comm.rank() != 0) return;
  uint64_t params = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) params += layout.segments[i].numel;
  std::printf("zfcore: model %s, %llu parameters in %u blocks, %s, world size %d (%s)\n", model.c_str(),
              (unsigned long long)params, layout.block_count, c10::toString(dtype), comm.world_size(),
              comm.name().c_str());
  std::printf("zfcore: plugins: stage %s, offload %s, optimizer %s, selector %s\n", plugins.stage.name(),
              plugins.offload.name(), plugins.optimizer.name(), plugins.selector.name());
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) {
    auto tags = runtime.memory.current_by_tag(tier);
    if (tags.empty()) continue;
    std::string detail;
    for (const auto &[tag, bytes] : tags)
      detail += format("%s%s %s", detail.empty() ? "" : ", ", tag.c_str(), format_bytes(bytes).c_str());
    std::printf("zfcore: memory %s: %s (%s)\n", tier_name(tier), format_bytes(runtime.memory.current(tier)).c_str(),
                detail.c_str());
  }
  std::fflush(stdout);
}

// A slice at a time: a 7B master is 28 GB, and a full copy per rank plus the gather's buffers
// would not fit beside the run.
void for_each_master_slice(Communicator &comm, const torch::Tensor &master, uint64_t shard_begin, uint64_t shard_end,
                           uint64_t padded_numel, uint64_t slice_numel,
                           const std::function<void(uint64_t lo, uint64_t hi, const float *values)> &visit) {
  const int world = comm.world_size();
  const uint64_t slice = std::max<uint64_t>(1, std::min(padded_numel, slice_numel));
  // A part of this rank's shard on the host: a view of a host master; a GPU master's is copied
  // through one pinned buffer (a pageable copy is several times slower).
  torch::Tensor staging;
  auto on_host = [&](uint64_t from, uint64_t to) {
    torch::Tensor part = master.narrow(0, int64_t(from - shard_begin), int64_t(to - from));
    if (part.is_cpu()) return part.contiguous();
    if (!staging.defined())
      staging = torch::empty({int64_t(slice)}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
    return staging.narrow(0, 0, part.numel()).copy_(part);
  };
  if (world == 1 && shard_begin == 0 && shard_end == padded_numel) {  // the whole master is here
    for (uint64_t lo = 0; lo < padded_numel; lo += slice) {
      const uint64_t hi = std::min(padded_numel, lo + slice);
      visit(lo, hi, on_host(lo, hi).data_ptr<float>());
    }
    return;
  }
  int64_t range[2] = {int64_t(shard_begin), int64_t(shard_end)};
  std::vector<int64_t> ranges(size_t(2 * world));
  comm.all_gather(zf_tensor_view{range, 2, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0},
                  zf_tensor_view{ranges.data(), ranges.size(), ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, nullptr);
  std::vector<float> mine(slice), all(slice * size_t(world)), whole(slice);
  for (uint64_t lo = 0; lo < padded_numel; lo += slice) {
    const uint64_t hi = std::min(padded_numel, lo + slice);
    std::fill(mine.begin(), mine.end(), 0.0f);
    const uint64_t from = std::max(lo, shard_begin), to = std::min(hi, shard_end);
    if (from < to) {
      std::memcpy(mine.data() + (from - lo), on_host(from, to).data_ptr<float>(), (to - from) * sizeof(float));
    }
    comm.all_gather(zf_tensor_view{mine.data(), mine.size(), ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                    zf_tensor_view{all.data(), all.size(), ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0}, nullptr);
    for (int r = 0; r < world; ++r) {  // ranks may own the same range (zero0): last copy wins, all equal
      const uint64_t a = std::max<uint64_t>(lo, uint64_t(ranges[2 * r]));
      const uint64_t b = std::min<uint64_t>(hi, uint64_t(ranges[2 * r + 1]));
      if (a < b) std::memcpy(whole.data() + (a - lo), all.data() + size_t(r) * slice + (a - lo), (b - a) * sizeof(float));
    }
    visit(lo, hi, whole.data());
  }
}

namespace {
uint64_t mix64(uint64_t x) {  // MurmurHash3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
}  // namespace

uint64_t digest_floats(const float *values, uint64_t n, uint64_t first) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    sum += mix64((first + i) * 0x9e3779b97f4a7c15ull + bits);
  }
  return sum;
}

std::string digest_string(uint64_t sum, uint64_t count) {
  return format("%016llx", (unsigned long long)mix64(sum + count));
}

std::string param_digest(Communicator &comm, const zf_layout &layout, const torch::Tensor &master,
                         uint64_t shard_begin, uint64_t shard_end, uint64_t /*padded_numel*/, uint64_t slice_numel) {
  // Each segment's position in the stream: the model's order (block by block), whatever order
  // the blocks lie in, so that the digest names the parameters' values and not their layout.
  std::vector<uint64_t> first(layout.segment_count);
  uint64_t total = 0;
  std::vector<uint32_t> model_order(layout.segment_count);
  for (uint32_t i = 0; i < layout.segment_count; ++i) model_order[i] = i;
  std::stable_sort(model_order.begin(), model_order.end(),
                   [&](uint32_t a, uint32_t b) { return layout.segments[a].block < layout.segments[b].block; });
  for (uint32_t i : model_order) {
    first[i] = total;
    total += layout.segments[i].numel;
  }
  // The digest is a sum over elements (mod 2^64): each rank hashes the elements it holds that no
  // lower rank holds (zero0: rank 0 all of them), and the ranks add their sums. Nothing is sent
  // but the sums: at 14B, gathering the master through every rank took minutes.
  const int world = comm.world_size();
  int64_t range[2] = {int64_t(shard_begin), int64_t(shard_end)};
  std::vector<int64_t> ranges(size_t(2 * world));
  comm.all_gather(zf_tensor_view{range, 2, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0},
                  zf_tensor_view{ranges.data(), ranges.size(), ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, nullptr);
  uint64_t begin = shard_begin;
  for (int r = 0; r < comm.rank(); ++r) begin = std::max(begin, uint64_t(ranges[size_t(2 * r + 1)]));
  struct Piece {
    const float *values;
    uint64_t n, first;
  };
  constexpr uint64_t kPiece = uint64_t(1) << 20;
  const uint64_t slice = std::max<uint64_t>(1, slice_numel);
  std::atomic<uint64_t> sum{0};
  uint32_t segment = 0;
  for (uint64_t lo = begin; lo < shard_end; lo += slice) {
    const uint64_t hi = std::min(shard_end, lo + slice);
    torch::Tensor part = master.narrow(0, int64_t(lo - shard_begin), int64_t(hi - lo));
    part = part.is_cpu() ? part.contiguous() : part.to(torch::kCPU);
    const float *values = part.data_ptr<float>();
    std::vector<Piece> pieces;  // the segments' values in this slice, cut small
    while (segment < layout.segment_count && layout.segments[segment].offset + layout.segments[segment].numel <= lo)
      ++segment;
    for (uint32_t i = segment; i < layout.segment_count && layout.segments[i].offset < hi; ++i) {
      const zf_segment &s = layout.segments[i];
      const uint64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
      for (uint64_t c = a; c < b; c += kPiece)
        pieces.push_back({values + (c - lo), std::min(kPiece, b - c), first[i] + (c - s.offset)});
    }
    parallel_chunks(int64_t(pieces.size()), [&](int64_t i) {
      const Piece &p = pieces[size_t(i)];
      sum += digest_floats(p.values, p.n, p.first);
    });
  }
  // The ranks' sums added mod 2^64 in 16-bit limbs (exact in int64 for any number of ranks).
  const uint64_t mine = sum;
  int64_t limbs[4];
  for (int k = 0; k < 4; ++k) limbs[k] = int64_t((mine >> (16 * k)) & 0xffff);
  comm.all_reduce(zf_tensor_view{limbs, 4, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
  uint64_t all = 0;
  for (int k = 0; k < 4; ++k) all += uint64_t(limbs[k]) << (16 * k);
  return digest_string(all, total);
}

}  // namespace zf
