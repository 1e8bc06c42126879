#include "cpu_optimizer.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <zf/zf_plugin.hpp>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace zf::cpu_kernels {

namespace {

const char *algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::adam: return "Adam (L2 weight decay)";
    case Algorithm::adamw: return "AdamW (decoupled weight decay)";
    case Algorithm::lion: return "Lion";
    case Algorithm::adagrad: return "Adagrad";
  }
  return "?";
}

unsigned thread_count(const std::vector<int> &cores, unsigned requested) {
  if (requested > 0) return requested;
  if (!cores.empty()) return unsigned(cores.size());
  const unsigned hardware = std::thread::hardware_concurrency();
  return hardware ? hardware : 1;
}

std::vector<int> pool_cores(const zf_host *host) { return host_worker_cores(host); }

GradFormat grad_format(zf_dtype dtype) {
  switch (dtype) {
    case ZF_DTYPE_F32: return GradFormat::f32;
    case ZF_DTYPE_BF16: return GradFormat::bf16;
    case ZF_DTYPE_F16: return GradFormat::f16;
  }
  throw Failure(ZF_ERROR_UNSUPPORTED,
                "grads must be F32, BF16 or F16 (got dtype " + std::to_string(dtype) + ")");
}

OutFormat out_format(const zf_tensor_view &view) {
  if (!view.data) return OutFormat::none;
  if (view.dtype == ZF_DTYPE_BF16) return OutFormat::bf16;
  if (view.dtype == ZF_DTYPE_F16) return OutFormat::f16;
  throw Failure(ZF_ERROR_UNSUPPORTED,
                "params_out must be BF16 or F16 (got dtype " + std::to_string(view.dtype) + ")");
}

// The state slots the algorithm keeps (those with a name), m before v: the order of state_spec,
// bind_state and state_tensor.
template <class Slot>
uint32_t kept_slots(Slot *m, Slot *v, Slot **out) {
  uint32_t count = 0;
  for (Slot *slot : {m, v})
    if (slot->name) out[count++] = slot;
  return count;
}

[[noreturn]] void invalid(const std::string &message) {
  throw Failure(ZF_ERROR_INVALID_ARGUMENT, message);
}

}  // namespace

std::vector<int> host_worker_cores(const zf_host *host) {
  std::vector<int> cores;
  if (!host || !host->worker_cores) return cores;
  const uint32_t count = host->worker_cores(host, nullptr, 0);
  cores.resize(count);
  if (count) cores.resize(host->worker_cores(host, cores.data(), count));
  return cores;
}

CpuOptimizer::CpuOptimizer(const zf_host *host, const CpuOptimizerOptions &options)
    : host_(host),
      options_(options),
      pool_(pool_cores(host), thread_count(pool_cores(host), options.threads)) {
  const std::vector<int> cores = pool_cores(host);
  std::string core_list;
  for (size_t i = 0; i < cores.size() && i < pool_.size(); ++i)
    core_list += (i ? "," : "") + std::to_string(cores[i]);
  zf::log(host_, ZF_LOG_INFO, "%s, %s kernels%s, %u worker threads %s%s, %s moments",
          algorithm_name(options_.algorithm), simd_name(options_.simd),
          prefetch_ ? " with software prefetch" : "", pool_.size(),
          cores.empty() ? "(unpinned: the host gave no worker cores)" : "pinned to cores ",
          core_list.c_str(), options_.moments == MomentFormat::f32 ? "fp32" : "bf16");
  if (!cores.empty() && pool_.size() > cores.size())
    zf::log(host_, ZF_LOG_WARN,
            "threads = %u is more than the %zu worker cores: threads share cores", pool_.size(),
            cores.size());
  for (int core : pool_.unpinned_cores())
    zf::log(host_, ZF_LOG_WARN, "could not pin a worker to core %d (not in the process's CPU set?)",
            core);
  switch (options_.algorithm) {
    case Algorithm::adam:
    case Algorithm::adamw:
      m_.name = "exp_avg";
      v_.name = "exp_avg_sq";
      break;
    case Algorithm::lion: m_.name = "exp_avg"; break;
    case Algorithm::adagrad: v_.name = "sum"; break;
  }
}

CpuOptimizer::~CpuOptimizer() {
  wait();
  if (owns_state_)
    for (StateSlot *slot : {&m_, &v_})
      if (slot->data) host_->mem_free(host_, slot->data);
}

bool CpuOptimizer::state_spec(uint32_t index, const char **name, zf_dtype *dtype) const {
  const StateSlot *list[2];
  if (index >= kept_slots(&m_, &v_, list)) return false;
  *name = list[index]->name;
  *dtype = moment_dtype();
  return true;
}

void CpuOptimizer::bind_state(uint64_t numel, const zf_tensor_view *state, uint32_t count) {
  if (in_flight_) invalid("bind_state while a step is in flight");
  // ABI 1.4: bound again (ZenFlow, at each selection), the new views replace the old ones.
  if (initialized_ && owns_state_) invalid("bind_state after init_state");
  StateSlot *list[2];
  const uint32_t expected = kept_slots(&m_, &v_, list);
  if (count != expected)
    invalid("bind_state got " + std::to_string(count) + " state views; this optimizer keeps " +
            std::to_string(expected));
  const zf_dtype dtype = moment_dtype();
  for (uint32_t i = 0; i < count; ++i) {
    const zf_tensor_view &view = state[i];
    if (view.numel != numel || view.dtype != dtype || view.device != ZF_DEVICE_CPU ||
        (numel && !view.data))
      invalid(std::string("state view '") + list[i]->name + "' must be a CPU view of " +
              std::to_string(numel) + " elements of dtype " + std::to_string(dtype));
    list[i]->data = view.data;
  }
  numel_ = numel;
  initialized_ = true;
  owns_state_ = false;
  fill_state();
}

void CpuOptimizer::init_state(uint64_t numel) {
  if (in_flight_) invalid("init_state while a step is in flight");
  if (initialized_) invalid("init_state called twice");
  numel_ = numel;
  initialized_ = true;
  owns_state_ = true;
  const uint64_t bytes = numel * moment_bytes();
  for (StateSlot *slot : {&m_, &v_}) {
    if (!slot->name || numel == 0) continue;
    const std::string tag = std::string(options_.algorithm == Algorithm::lion      ? "lion."
                                        : options_.algorithm == Algorithm::adagrad ? "adagrad."
                                                                                   : "adam.") +
                            (slot == &m_ ? "m" : "v");
    zf_error error{};
    slot->data = host_->mem_alloc(host_, ZF_TIER_HOST, bytes, tag.c_str(), &error);
    if (!slot->data) throw Failure(ZF_ERROR_OUT_OF_MEMORY, error.message);
#if defined(MADV_HUGEPAGE)
    // Fewer TLB misses over 4 streams of gigabytes; harmless where THP is off.
    madvise(slot->data, bytes, MADV_HUGEPAGE);
#endif
  }
  fill_state();
}

// First touch: the worker that will update a chunk writes its initial state, so its pages land on
// that worker's NUMA node.
void CpuOptimizer::fill_state() {
  const zf_optimizer_range all{0, numel_, 0, 0};
  build_chunks(&all, 1);
  pool_.run(&CpuOptimizer::fill_chunk, this, chunks_.size());
}

void CpuOptimizer::fill_chunk(void *context, uint64_t index) {
  auto *self = static_cast<CpuOptimizer *>(context);
  const Chunk &chunk = self->chunks_[index];
  const size_t element = self->moment_bytes();
  if (self->m_.data)
    std::memset(static_cast<char *>(self->m_.data) + chunk.begin * element, 0,
                (chunk.end - chunk.begin) * element);
  if (!self->v_.data) return;
  const float initial = self->options_.initial_accumulator;
  if (self->options_.moments == MomentFormat::f32) {
    float *v = static_cast<float *>(self->v_.data);
    for (uint64_t i = chunk.begin; i < chunk.end; ++i) v[i] = initial;
  } else {
    uint16_t *v = static_cast<uint16_t *>(self->v_.data);
    const uint16_t bits = zf::float_to_bf16(initial);
    for (uint64_t i = chunk.begin; i < chunk.end; ++i) v[i] = bits;
  }
}

void CpuOptimizer::build_chunks(const zf_optimizer_range *ranges, uint32_t range_count) {
  chunks_.clear();
  for (uint32_t r = 0; r < range_count; ++r) {
    uint64_t begin = ranges[r].begin;
    while (begin < ranges[r].end) {
      const uint64_t boundary = (begin / kChunkElements + 1) * kChunkElements;
      const uint64_t end = boundary < ranges[r].end ? boundary : ranges[r].end;
      chunks_.push_back(Chunk{begin, end, ranges[r].group});
      begin = end;
    }
  }
}

void CpuOptimizer::validate(const zf_optimizer_step_args &args) const {
  if (!initialized_) invalid("step before init_state");
  if (args.struct_size < offsetof(zf_optimizer_step_args, stream))
    invalid("zf_optimizer_step_args.struct_size " + std::to_string(args.struct_size) +
            " is too small for ABI 1.0");
  if (args.step < 1) invalid("step must be >= 1 (got " + std::to_string(args.step) + ")");
  if (!std::isfinite(args.grad_scale))
    invalid("grad_scale must be finite (got " + std::to_string(args.grad_scale) + ")");
  const zf_tensor_view &p = args.params, &g = args.grads, &out = args.params_out;
  if (!p.data || p.dtype != ZF_DTYPE_F32 || p.device != ZF_DEVICE_CPU)
    throw Failure(ZF_ERROR_UNSUPPORTED, "params must be a CPU F32 view");
  if (p.numel > numel_)
    invalid("params has " + std::to_string(p.numel) + " elements but the state covers " +
            std::to_string(numel_) + " (init_state)");
  if (!g.data || g.device != ZF_DEVICE_CPU || g.numel != p.numel)
    invalid("grads must be a CPU view with params' numel (" + std::to_string(p.numel) + ")");
  if (out.data && (out.device != ZF_DEVICE_CPU || out.numel != p.numel))
    invalid("params_out must be a CPU view with params' numel (" + std::to_string(p.numel) + ")");
  if (args.range_count && !args.ranges) invalid("ranges is NULL");
  if (args.group_count == 0 || !args.groups) invalid("no parameter groups");
  uint64_t previous_end = 0;
  for (uint32_t r = 0; r < args.range_count; ++r) {
    const zf_optimizer_range &range = args.ranges[r];
    if (range.begin > range.end || range.end > p.numel || range.begin < previous_end)
      invalid("range " + std::to_string(r) + " [" + std::to_string(range.begin) + ", " +
              std::to_string(range.end) + ") is not sorted, disjoint and within [0, " +
              std::to_string(p.numel) + ")");
    if (range.group >= args.group_count)
      invalid("range " + std::to_string(r) + " names group " + std::to_string(range.group) +
              " of " + std::to_string(args.group_count));
    previous_end = range.end;
  }
  const bool uses_eps = options_.algorithm != Algorithm::lion;
  for (uint32_t i = 0; i < args.group_count; ++i) {
    const zf_optimizer_group &group = args.groups[i];
    const std::string where = "group " + std::to_string(i) + ": ";
    if (!(group.lr >= 0) || !std::isfinite(group.lr))
      invalid(where + "lr must be finite and >= 0 (got " + std::to_string(group.lr) + ")");
    if (!(group.beta1 >= 0 && group.beta1 < 1) || !(group.beta2 >= 0 && group.beta2 < 1))
      invalid(where + "betas must be in [0, 1) (got " + std::to_string(group.beta1) + ", " +
              std::to_string(group.beta2) + ")");
    if (uses_eps && !(group.eps > 0))
      invalid(where + "eps must be > 0 (got " + std::to_string(group.eps) + ")");
    if (!(group.weight_decay >= 0) || !std::isfinite(group.weight_decay))
      invalid(where + "weight_decay must be finite and >= 0 (got " +
              std::to_string(group.weight_decay) + ")");
  }
}

// Step-dependent factors in double from the integer step, rounded once to float.
GroupCoefficients CpuOptimizer::coefficients(const zf_optimizer_group &group, float grad_scale,
                                             int64_t step) const {
  const double lr = group.lr, beta1 = group.beta1, beta2 = group.beta2;
  const double weight_decay = group.weight_decay;
  GroupCoefficients c{};
  c.grad_scale = grad_scale;
  c.beta1 = group.beta1;
  c.one_minus_beta1 = float(1.0 - beta1);
  c.beta2 = group.beta2;
  c.one_minus_beta2 = float(1.0 - beta2);
  c.eps = group.eps;
  c.l2 = 0.0f;
  c.decay = 1.0f;
  c.step_size = group.lr;
  c.bias_correction2_sqrt = 1.0f;
  switch (options_.algorithm) {
    case Algorithm::adam:
    case Algorithm::adamw: {
      const double t = double(step);
      c.step_size = float(lr / (1.0 - std::pow(beta1, t)));
      c.bias_correction2_sqrt = float(std::sqrt(1.0 - std::pow(beta2, t)));
      if (options_.algorithm == Algorithm::adamw)
        c.decay = float(1.0 - lr * weight_decay);
      else
        c.l2 = group.weight_decay;
      break;
    }
    case Algorithm::lion: c.decay = float(1.0 - lr * weight_decay); break;
    case Algorithm::adagrad:
      c.l2 = group.weight_decay;
      c.step_size = float(lr / (1.0 + double(step - 1) * options_.lr_decay));
      break;
  }
  return c;
}

void CpuOptimizer::submit(const zf_optimizer_step_args &args) {
  if (in_flight_) invalid("submit while a step is in flight: call wait first");
  validate(args);
  kernel_ = select_update_kernel(options_.simd, options_.algorithm, grad_format(args.grads.dtype),
                                 options_.moments, out_format(args.params_out));
  operands_ = UpdateOperands{static_cast<float *>(args.params.data),
                             args.grads.data,
                             m_.data,
                             v_.data,
                             args.params_out.data,
                             prefetch_};
  coefficients_.clear();
  for (uint32_t i = 0; i < args.group_count; ++i)
    coefficients_.push_back(coefficients(args.groups[i], args.grad_scale, args.step));
  build_chunks(args.ranges, args.range_count);

  uint64_t elements = 0;
  for (uint32_t r = 0; r < args.range_count; ++r)
    elements += args.ranges[r].end - args.ranges[r].begin;
  in_flight_ = true;
  on_pool_ = elements > kInlineElements;
  if (on_pool_) {
    pool_.start(&CpuOptimizer::run_chunk, this, chunks_.size());
  } else {
    for (uint64_t i = 0; i < chunks_.size(); ++i) run_chunk(this, i);
  }
}

void CpuOptimizer::run_chunk(void *context, uint64_t index) {
  auto *self = static_cast<CpuOptimizer *>(context);
  const Chunk &chunk = self->chunks_[index];
  self->kernel_(self->operands_, self->coefficients_[chunk.group], chunk.begin, chunk.end);
}

void CpuOptimizer::wait() {
  if (!in_flight_) return;
  if (on_pool_) pool_.wait();
  in_flight_ = false;
  on_pool_ = false;
}

bool CpuOptimizer::state_tensor(uint32_t index, const char **name, zf_tensor_view *view) const {
  const StateSlot *list[2];
  if (index >= kept_slots(&m_, &v_, list)) return false;
  *name = list[index]->name;
  *view = zf_tensor_view{};
  view->data = list[index]->data;
  view->numel = numel_;
  view->dtype = moment_dtype();
  view->device = ZF_DEVICE_CPU;
  return true;
}

}  // namespace zf::cpu_kernels
