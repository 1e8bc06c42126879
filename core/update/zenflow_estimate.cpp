#include "update/zenflow_estimate.hpp"

#include "model/linear_stack.hpp"
#include "model/transformer.hpp"
#include "model/zoo.hpp"
#include "params/flat_buffers.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "update/zenflow_options.hpp"

#include <algorithm>

namespace zf {
namespace {

// The model's parameters as the run lays them out, without memory for them.
std::unique_ptr<FlatBuffers> model_layout(const RunConfig &config, std::unique_ptr<Model> &model) {
  if (is_transformer_config(config)) {
    model = make_unallocated_transformer(transformer_options(config));
  } else {
    ZF_REQUIRE(config.string("model", "type") == "linear_stack", "%s: model.type = \"%s\" is not built into this zfcore",
               config.where("model", "type").str().c_str(), config.string("model", "type").c_str());
    model = make_unallocated_linear_stack(config.integer("model", "hidden"), config.integer("model", "layers"),
                                          compute_dtype(config));
  }
  return std::make_unique<FlatBuffers>(model->parameters(), model->block_names(), column_major(config),
                                       interleaved_blocks(config));
}

}  // namespace

std::vector<uint64_t> zenflow_group_ends(uint64_t numel, uint64_t count, uint64_t bucket) {
  const uint64_t grid = bucket > 0 && bucket * count <= numel ? bucket : 1;
  std::vector<uint64_t> ends(count);
  for (uint64_t k = 0; k < count; ++k)
    ends[k] = k + 1 == count ? numel : std::max(k == 0 ? 0 : ends[k - 1], numel * (k + 1) / count / grid * grid);
  return ends;
}

uint64_t zenflow_capacity(const RunConfig &config) {
  const double limit_gb = config.real("run", "device_memory_limit_gb");
  if (limit_gb > 0) return uint64_t(limit_gb * double(1ull << 30));  // as the run reads it (run_setup.cpp)
  if (config.string("run", "device") == "cuda" && cuda_device_count() > 0) return device_free_bytes();
  return 0;
}

ZenFlowEstimate estimate_zenflow(const RunConfig &config, const ConfigEstimate &e, uint64_t capacity,
                                 uint64_t first_peak) {
  ZenFlowEstimate z;
  const ZenFlowOptions options = ZenFlowOptions::read(config, 1);
  z.staggered = options.staggered;
  z.lookahead = options.correction == ZenFlowOptions::Correction::lookahead;
  z.automatic = options.topk_ratio == 0;
  z.update_interval = options.update_interval;
  std::unique_ptr<Model> model;
  const std::unique_ptr<FlatBuffers> flat = model_layout(config, model);
  const zf_layout &layout = flat->layout();
  z.tables = shard_elements(layout, 0, layout.numel).tables > 0;

  // The stage's shard: the whole layout, or (zero1-3, zero_shard.hpp) ceil(numel / world) rounded
  // up to the layout's alignment, rank r's from r times that.
  uint64_t blocks = 0;
  for (uint64_t b : e.input.blocks) blocks += b;
  const uint64_t master = e.own_stage().master;
  const uint64_t world = e.input.world, align = std::max<uint64_t>(1, layout.alignment);
  const bool sharded = world > 1 && master / 4 < blocks;
  z.shard = sharded ? std::max(align, ((layout.numel + world - 1) / world + align - 1) / align * align) : layout.numel;

  const uint64_t c = e.input.compute_bytes;
  z.staged = z.shard;  // the deepspeed schedule's
  if (z.staggered && z.update_interval > 0) {
    z.staged = 0;
    uint64_t begin = 0;
    for (uint64_t end : zenflow_group_ends(z.shard, uint64_t(z.update_interval), e.bucket_numel)) {
      z.staged = std::max(z.staged, end - begin);
      begin = end;
    }
  }
  z.gradient_sum = (e.input.grad_bytes ? e.input.grad_bytes : c) * z.shard;  // fp32 with train.grad_accum_dtype
  z.staging = c * z.staged;
  z.last_cpu = z.lookahead ? c * z.shard : 0;
  z.element = selected_element_bytes(4 + e.input.state_bytes, c);

  const uint64_t ranks = sharded ? world : 1;
  auto range = [&](uint64_t r) { return std::make_pair(r * z.shard, (r + 1) * z.shard); };
  z.topk = z.automatic ? kMinAutoTopk : options.topk_ratio;
  if (z.automatic) {
    // As the run's choice (zenflow_topk.cpp): what is left after the first step's peak and a tenth
    // kept free, the same on every rank (the smallest); its tokens chosen among on every rank if on one.
    const uint64_t used = first_peak + z.buffers(), margin = capacity / 10;
    z.room_known = capacity > 0;
    if (z.room_known) {
      const uint64_t left = capacity > used + margin ? capacity - used - margin : 0;
      double topk = 1.0;
      for (uint64_t r = 0; r < ranks; ++r) {
        const AutoTopk chosen = auto_topk(shard_elements(layout, range(r).first, range(r).second),
                                          left / z.element.total());
        topk = std::min(topk, chosen.topk);
        z.table_rows = z.table_rows || chosen.table_rows;
      }
      z.topk = topk;
      z.room_why = format("%s of %s stay after the first step's peak of about %s and a tenth kept free",
                          format_bytes(left).c_str(), format_bytes(capacity).c_str(), format_bytes(used).c_str());
    } else {
      z.table_rows = z.tables;  // its least: the tokens chosen among too (the run's plan counts the same)
      z.room_why = "the memory it fills is not known here (run.device_memory_limit_gb, or run on the GPU's machine)";
    }
  }
  for (uint64_t r = 0; r < ranks; ++r) {
    const uint64_t n = selected_numel(layout, range(r).first, range(r).second, z.topk, !z.table_rows);
    if (n > z.selected) z.selected = n, z.rank = r;
  }
  if (z.topk >= 1) z.element.held = 4 + e.input.state_bytes;  // the whole shard: no index, the result in place
  return z;
}

}  // namespace zf
