// residency.hpp: where the working parameters are while blocks compute. Under a stage that shards
// parameters (ZF_CAP_SHARD_PARAMETERS, ZeRO-3) this rank holds its shard plus the resident blocks;
// every other block is gathered (by the stage's gather_block, on the communication stream) before
// its forward and backward, ahead of time up to the stage's prefetch budget, and released after.
// Under parameter offload (an offload plan with a host param_tier, cpu_full) the shard, or under
// other stages all the parameters, stay in host memory and a block is gathered the same way (the
// stage's gather_block reads the host shard; otherwise a copy of the block from host memory).
// Without either each call here returns at once.
#pragma once

#include "params/sharded_params.hpp"
#include "model/model.hpp"
#include "plugin/plugin_kinds.hpp"

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
  Residency(const StagePlugin &stage, Runtime &runtime, FlatBuffers &flat, const Model &model, zf_tier tier,
            StepBuffers buffers);

  // From here on this rank holds layout elements [store_begin, store_begin + store.numel()) of the
  // parameters in `store` (ShardedParameters: the shard, the fp32 master of it, or flat.params when
  // whole), and the resident blocks; stage_gathers: the stage's gather_block fills a block, else
  // a copy from the store. whole: the store is every element of the buffers. Blocks are gathered
  // into storage of dtype (the compute dtype).
  void shard(uint64_t store_begin, torch::Tensor store, bool whole, torch::Dtype dtype, std::vector<uint8_t> resident,
             uint64_t prefetch_numel, bool stage_gathers);
  bool sharded() const { return sharded_ != nullptr; }
  // Layout elements [begin, end) of the store.
  torch::Tensor stored(uint64_t begin, uint64_t end) const;
  // The whole parameter buffer where the store holds it (parameter offload without ZeRO-3), else undefined.
  torch::Tensor whole() const;

  // Which pass leaves a block: a training step's forward (every block is used again by its
  // backward), its backward (blocks N-1 .. 0), or an evaluation's forward (no backward follows).
  enum class Pass { forward, backward, inference };
  // Before a block computes (forward, backward or evaluation): gather it and the blocks whose tied
  // weights it reads, or wait for them if gathered ahead (unsharded: wait for their update).
  // After: release those whose last use in this micro-step it was. A block used by one block is
  // released after its forward and gathered again for its backward (as ZeRO-3 reshards after the
  // forward); one that several blocks read (a tied embedding) stays from its first use in the
  // forward to its last in the backward, so it is gathered once per micro-step.
  void enter(uint32_t block, int64_t step);
  void leave(uint32_t block, Pass pass);
  // GPU runs: gathers the blocks after `block` in the direction of travel (+1 forward, -1 backward)
  // on the communication stream while `block` computes.
  void prefetch_after(uint32_t block, int direction, int64_t step);
  // Before a block's parameters are read, gathered (ahead, resident or at its use) or in place
  // where nothing is sharded, this runs with the block's layout elements [begin, end): under a
  // deferred update (UpdatePlan::ready_for) it waits for this rank's part of them.
  void before_read(std::function<void(uint64_t begin, uint64_t end)> wait) { before_read_ = std::move(wait); }
  // Resident blocks hold gathered copies: refresh them after the shard changed, now or (lazily,
  // while a deferred update still writes the shard) when each is next entered.
  void gather_resident(int64_t step, bool lazily = false);
  // Every rank gathers every block, so that rank 0 can export or sample the whole model.
  void gather_whole_model();
  // How often each block was gathered (or copied from the store) so far; empty when not sharded.
  const std::vector<int64_t> &gather_counts() const { return gathers_; }

 private:
  void gather_block(uint32_t block, int64_t step, bool ahead);
  void wait_gathered(uint32_t block);
  void wait_for_update(uint32_t block) const;
  std::vector<uint32_t> needed_by(uint32_t block) const;
  bool last_use(uint32_t held, uint32_t block, Pass pass) const;

  const StagePlugin &stage_;
  Runtime &runtime_;
  FlatBuffers &flat_;
  const Model &model_;
  zf_tier tier_;
  StepBuffers buffers_;
  std::unique_ptr<ShardedParameters> sharded_;
  std::vector<void *> gathered_;  // per block: event after its gather ahead, until entered
  std::vector<std::vector<uint32_t>> users_;  // per block: the blocks that need it, ascending
  std::vector<int64_t> gathers_;             // per block: gathers so far
  uint64_t prefetch_numel_ = 0;   // elements the stage lets the host gather ahead (GPU runs)
  std::function<void(uint64_t, uint64_t)> before_read_;
  std::vector<uint8_t> stale_;    // per resident block: the shard changed since its gather
  bool stage_gathers_ = true;
  bool whole_ = false;  // the store is the whole parameter buffer
};

}  // namespace zf
