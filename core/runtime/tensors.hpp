// tensors.hpp: torch tensors and the plugin ABI's views of them, and tensors on ledger memory.
#pragma once

#include "runtime/memory.hpp"

#include <torch/torch.h>
#include <zf/zf_plugin.h>

#include <string>

namespace zf {

// A ledger allocation of numel elements of dtype as a tensor (freed back to the ledger), zero-filled
// unless zero = false (the owner writes every element first).
torch::Tensor ledger_tensor(MemoryLedger &ledger, zf_tier tier, uint64_t numel, torch::Dtype dtype,
                            const std::string &tag, bool zero = true);

zf_tensor_view view_of(const torch::Tensor &tensor);  // contiguous tensor -> ABI view
torch::Tensor tensor_of(const zf_tensor_view &view);  // ABI view -> 1-D tensor on its memory (not owned)
zf_dtype abi_dtype(torch::Dtype dtype);
torch::Dtype torch_dtype(zf_dtype dtype);

}  // namespace zf
