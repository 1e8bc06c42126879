#include "model/init.hpp"

#include "runtime/parallel.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace zf {

namespace {
// Round to nearest even, as torch's conversion does (the values are finite).
void round_to_bf16(const float *from, uint16_t *to, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, from + i, sizeof bits);
    to[i] = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}
}  // namespace

torch::Tensor random_normal(const std::vector<int64_t> &sizes, double std, torch::Dtype dtype) {
  uint64_t seed = 0;
  {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    seed = generator.get<at::CPUGeneratorImpl>()->random64();
  }
  torch::Tensor value = torch::empty(sizes, torch::TensorOptions().dtype(dtype));
  torch::Tensor flat = value.view(-1);
  constexpr int64_t kPiece = int64_t(1) << 20;
  const int64_t numel = flat.numel(), pieces = (numel + kPiece - 1) / kPiece;
  // Each piece is drawn by ATen's serial kernel into the thread's scratch memory, then rounded
  // here: a torch op splitting its work over torch's threads from several threads at once would
  // oversubscribe the cores, and fresh fp32 temporaries would double the pages to fault in.
  parallel_chunks(pieces, [&](int64_t piece) {
    const int64_t lo = piece * kPiece, n = std::min(kPiece, numel - lo);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed + 0x9e3779b97f4a7c15ull * uint64_t(piece + 1));
    torch::Tensor part = flat.narrow(0, lo, n);
    if (dtype == torch::kFloat32) {
      part.normal_(0.0, std, generator);
      return;
    }
    thread_local std::vector<float> scratch;
    scratch.resize(size_t(kPiece));
    torch::from_blob(scratch.data(), {n}).normal_(0.0, std, generator);
    if (dtype == torch::kBFloat16) {
      round_to_bf16(scratch.data(), static_cast<uint16_t *>(part.data_ptr()), n);
    } else {
      part.copy_(torch::from_blob(scratch.data(), {n}));
    }
  });
  return value;
}

}  // namespace zf
