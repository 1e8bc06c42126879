// fused_experts.hpp: the checkpoint layout of a layer's experts in Qwen3.5-MoE (MoeSpec::fused_experts)
// and Gemma 4 (Gemma4Spec::experts): mlp.experts.gate_up_proj (Gemma 4: experts.gate_up_proj) [E, 2I, H]
// (expert e's gate_proj rows, then its up_proj rows) and mlp.experts.down_proj [E, H, I]. zfcore holds
// one 2-D parameter per expert and matrix, named as transformers writes Qwen3.5-MoE's one expert at a
// time (mlp.experts.E.{gate,up,down}_proj.weight; Gemma 4: experts.E.*), so that
// ZeRO shards, offload and ZenFlow's column selection see the same matrices as for the other
// mixtures of experts; loading reads each parameter's slice, an export writes the 3-D tensors.
// No libtorch here.
#pragma once

#include "model/transformer_shape.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// Where a checkpoint stores a parameter as part of a 3-D tensor: the parameter is rows
// [row0, row0 + its rows) of slice `index` of the tensor `name` of shape `shape`.
struct FusedSlice {
  std::string name;
  std::vector<int64_t> shape;
  int64_t index = -1, row0 = 0;
  bool defined() const { return index >= 0; }
};

// The fused tensor that holds parameter `name` ("model.layers.3.mlp.experts.5.up_proj.weight") of a
// model of shape `s`; undefined for a parameter stored on its own.
FusedSlice fused_expert_slice(const TransformerShape &s, const std::string &name);

}  // namespace zf
