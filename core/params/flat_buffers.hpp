// flat_buffers.hpp: the model's parameters and gradients as two flat 1-D tensors (one allocation
// each, from the memory ledger), every model parameter a view into them, and the layout (segment
// and block tables) that plugins see. 2-D weights can be stored column by column so that one
// input channel is contiguous (ZenFlow selects columns). The blocks lie in the model's order, or
// interleaved (model.block_order): segments always ascend in offset, blocks then do not.
#pragma once

#include "model/model.hpp"
#include "model/param_source.hpp"
#include "runtime/memory.hpp"
#include "runtime/tensors.hpp"

#include <zf/zf_plugin.h>

#include <string>
#include <vector>

namespace zf {

// The order in which `blocks` blocks lie in memory when interleaved: bit-reversed indices (0, n/2,
// n/4, 3n/4, ... for n a power of two), so that any contiguous quarter of them holds every fourth
// block, any half every other one. Under ZeRO-3 a rank's shard then holds blocks whose gradients
// are final early in the backward as well as late ones, and its CPU update can start at once.
std::vector<uint32_t> interleaved_block_order(uint32_t blocks);

class FlatBuffers {
 public:
  static constexpr uint64_t kAlignment = 64;  // elements

  // interleave_blocks: the blocks lie in interleaved_block_order, so that every contiguous share of
  // the buffers (a ZeRO shard) holds blocks from the whole depth of the model.
  FlatBuffers(std::vector<ModelParameter> parameters, const std::vector<std::string> &block_names,
              bool column_major, bool interleave_blocks = false);
  FlatBuffers(const FlatBuffers &) = delete;
  FlatBuffers &operator=(const FlatBuffers &) = delete;

  const zf_layout &layout() const { return layout_; }
  const std::vector<ModelParameter> &parameters() const { return parameters_; }  // the model's order

  // Allocates params and grads with numel (>= layout numel) elements of dtype on tier (host, or
  // the current GPU for ZF_TIER_DEVICE), copies each parameter's current value in and re-points
  // the parameter and its .grad at views of them (the model moves to the buffers' device).
  // Without grads (evaluation) no gradient buffer is allocated. The parameters go on param_tier
  // instead when it is given (parameter offload: host memory, until each block is bound to
  // storage of its own).
  void materialize(uint64_t numel, torch::Dtype dtype, MemoryLedger &ledger, zf_tier tier = ZF_TIER_HOST,
                   bool with_grads = true, zf_tier param_tier = ZF_TIER_COUNT);
  // The parts of materialize: params holding `values` (the parameters may have shapes only), and grads.
  void allocate_params(uint64_t numel, torch::Dtype dtype, MemoryLedger &ledger, zf_tier tier,
                       const ParameterSource &values);
  void allocate_grads(uint64_t numel, torch::Dtype dtype, MemoryLedger &ledger, zf_tier tier);

  // Writes layout elements [begin, end) of the parameters, as `values` gives them (zeros between
  // segments), into destination (contiguous, end - begin elements, host or device: a device
  // destination is filled through host memory, 64 Mi elements or a whole segment at a time).
  void fill(const ParameterSource &values, uint64_t begin, uint64_t end, torch::Tensor destination) const;

  // Re-points the parameters of `block` at views of storage, which holds the block's layout
  // elements [block.offset, block.offset + block.numel) (sharded parameters: one storage per block).
  void bind_block(uint32_t block, const torch::Tensor &storage);
  // The same for the parameters' .grad (sharded gradients: one storage per block).
  void bind_block_grads(uint32_t block, const torch::Tensor &storage);

  torch::Tensor params;  // flat working parameters (undefined once parameters are sharded)
  torch::Tensor grads;   // flat gradients (accumulated over micro-steps)

 private:
  torch::Tensor view_of(const torch::Tensor &flat, size_t segment, uint64_t base_offset = 0) const;
  std::vector<ModelParameter> parameters_;
  std::vector<size_t> parameter_of_;  // per segment: its index in parameters_
  std::vector<std::string> names_;  // per segment: owns the strings segments point to
  std::vector<std::string> block_names_;
  std::vector<zf_segment> segments_;
  std::vector<zf_block> blocks_;
  zf_layout layout_{};
};

}  // namespace zf
