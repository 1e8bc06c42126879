#include "runtime/tensors.hpp"

#include "runtime/error.hpp"
#include "runtime/parallel.hpp"

#include <c10/core/Device.h>

#include <cstring>
#include <map>

namespace zf {

zf_dtype abi_dtype(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return ZF_DTYPE_F32;
    case torch::kBFloat16: return ZF_DTYPE_BF16;
    case torch::kFloat16: return ZF_DTYPE_F16;
    case torch::kFloat64: return ZF_DTYPE_F64;
    case torch::kInt32: return ZF_DTYPE_I32;
    case torch::kInt64: return ZF_DTYPE_I64;
    case torch::kUInt8: return ZF_DTYPE_U8;
    default: throw Error(format("dtype %s has no ABI equivalent", c10::toString(dtype)));
  }
}

zf_tensor_view view_of(const torch::Tensor &tensor) {
  ZF_REQUIRE(tensor.is_contiguous(), "internal: ABI views need contiguous tensors");
  zf_tensor_view view{};
  view.data = tensor.data_ptr();
  view.numel = uint64_t(tensor.numel());
  view.dtype = abi_dtype(tensor.scalar_type());
  view.device = tensor.is_cuda() ? ZF_DEVICE_CUDA : ZF_DEVICE_CPU;
  view.device_index = tensor.is_cuda() ? tensor.get_device() : 0;
  return view;
}

torch::Dtype torch_dtype(zf_dtype dtype) {
  static const std::map<zf_dtype, torch::Dtype> dtypes = {
      {ZF_DTYPE_F32, torch::kFloat32}, {ZF_DTYPE_BF16, torch::kBFloat16}, {ZF_DTYPE_F16, torch::kFloat16},
      {ZF_DTYPE_F64, torch::kFloat64}, {ZF_DTYPE_I32, torch::kInt32},    {ZF_DTYPE_I64, torch::kInt64},
      {ZF_DTYPE_U8, torch::kUInt8}};
  auto found = dtypes.find(dtype);
  ZF_REQUIRE(found != dtypes.end(), "ABI view with unknown dtype %d", int(dtype));
  return found->second;
}

torch::Tensor tensor_of(const zf_tensor_view &view) {
  auto options = torch::TensorOptions().dtype(torch_dtype(view.dtype));
  if (view.device == ZF_DEVICE_CUDA) options = options.device(torch::kCUDA, c10::DeviceIndex(view.device_index));
  return torch::from_blob(view.data, {int64_t(view.numel)}, options);
}

torch::Tensor ledger_tensor(MemoryLedger &ledger, zf_tier tier, uint64_t numel, torch::Dtype dtype,
                            const std::string &tag, bool zero) {
  size_t bytes = numel * c10::elementSize(dtype);
  void *memory = ledger.allocate(tier, bytes, tag);
  auto release = [&ledger](void *p) { ledger.release(p); };
  if (tier == ZF_TIER_DEVICE) {  // on the current GPU, zeroed in stream order
    auto options = torch::TensorOptions().dtype(dtype).device(torch::kCUDA);
    torch::Tensor tensor = torch::from_blob(memory, {int64_t(numel)}, release, options);
    return zero ? tensor.zero_() : tensor;
  }
  if (zero) {  // first touch on the rank's cores (zeroing pages is the kernel's work, per faulting thread)
    constexpr size_t kPiece = size_t(64) << 20;
    parallel_chunks(int64_t((bytes + kPiece - 1) / kPiece), [&](int64_t piece) {
      const size_t lo = size_t(piece) * kPiece;
      std::memset(static_cast<char *>(memory) + lo, 0, std::min(kPiece, bytes - lo));
    });
  }
  return torch::from_blob(memory, {int64_t(numel)}, release, torch::TensorOptions().dtype(dtype));
}

}  // namespace zf
