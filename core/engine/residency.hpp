// residency.hpp: where the working parameters are while blocks compute. Under a stage that shards
// parameters (ZF_CAP_SHARD_PARAMETERS, ZeRO-3) this rank holds its shard plus the resident blocks;
// every other block is gathered (by the stage's gather_block, on the communication stream) before
// its forward and backward, ahead of time up to the stage's prefetch budget, and released after.
// Under every other stage each call here returns at once.
#pragma once

#include "engine/sharded_params.hpp"
#include "model/model.hpp"
#include "plugin/plugin_instance.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace zf {

// The step's buffers moved to the communication stream (GPU runs): work queued there starts after
// the compute queued so far. On CPU both streams are NULL and this changes nothing.
zf_step_buffers on_comm_stream(const Runtime &runtime, zf_step_buffers buffers);

class Residency {
 public:
  // The step's buffers as a stage entry sees them (for gather_block).
  using StepBuffers = std::function<zf_step_buffers(int64_t step)>;
  Residency(PluginInstance &stage, Runtime &runtime, FlatBuffers &flat, const Model &model, zf_tier tier,
            StepBuffers buffers);

  // From here on this rank holds [shard_begin, shard_end) of the parameters and the resident blocks.
  void shard(uint64_t shard_begin, uint64_t shard_end, std::vector<uint8_t> resident, uint64_t prefetch_numel);
  bool sharded() const { return sharded_ != nullptr; }
  torch::Tensor &shard_params() { return sharded_->shard; }

  // Before a block computes (forward, backward or evaluation): gather it and the blocks whose tied
  // weights it reads, or wait for them if gathered ahead. After: release them.
  void enter(uint32_t block, int64_t step);
  void leave(uint32_t block);
  // GPU runs: gathers the blocks after `block` in the direction of travel (+1 forward, -1 backward)
  // on the communication stream while `block` computes.
  void prefetch_after(uint32_t block, int direction, int64_t step);
  // Resident blocks hold gathered copies: refresh them after the shard changed.
  void gather_resident(int64_t step);
  // Every rank gathers every block, so that rank 0 can export or sample the whole model.
  void gather_whole_model();

 private:
  void gather_block(uint32_t block, int64_t step, bool ahead);
  void wait_gathered(uint32_t block);
  std::vector<uint32_t> needed_by(uint32_t block) const;

  PluginInstance &stage_;
  Runtime &runtime_;
  FlatBuffers &flat_;
  const Model &model_;
  zf_tier tier_;
  StepBuffers buffers_;
  std::unique_ptr<ShardedParameters> sharded_;
  std::vector<void *> gathered_;  // per block: event after its gather ahead, until entered
  uint64_t prefetch_numel_ = 0;   // elements the stage lets the host gather ahead (GPU runs)
};

}  // namespace zf
