#include "model/init.hpp"

#include "runtime/error.hpp"
#include "runtime/parallel.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace zf {

namespace {
constexpr int64_t kPiece = int64_t(1) << 20;  // elements drawn from one generator

// Round to nearest even, as torch's conversion does (the values are finite).
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Piece `piece` of a tensor of `numel` elements: ATen's serial kernel draws it into the thread's
// scratch memory (a torch op splitting its work over torch's threads from several threads at once
// would oversubscribe the cores, and fresh temporaries would double the pages to fault in).
const float *draw_piece(uint64_t seed, double std, int64_t numel, int64_t piece) {
  const int64_t n = std::min(kPiece, numel - piece * kPiece);
  thread_local std::vector<float> scratch;
  scratch.resize(size_t(kPiece));
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed + 0x9e3779b97f4a7c15ull * uint64_t(piece + 1));
  torch::from_blob(scratch.data(), {n}).normal_(0.0, std, generator);
  return scratch.data();
}
}  // namespace

uint64_t draw_init_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get<at::CPUGeneratorImpl>()->random64();
}

void fill_normal(uint64_t seed, double std, int64_t rows, int64_t cols, const StoredRegion &region,
                 torch::Tensor destination) {
  const torch::Dtype dtype = destination.scalar_type();
  ZF_REQUIRE(dtype == torch::kFloat32 || dtype == torch::kBFloat16, "internal: random values of %s",
             c10::toString(dtype));
  ZF_REQUIRE(destination.is_contiguous() && destination.numel() == region.numel(), "internal: fill_normal's destination");
  if (region.numel() == 0) return;
  const bool bf16 = dtype == torch::kBFloat16;
  void *out = destination.data_ptr();
  auto put = [&](int64_t at, float value) {
    if (bf16) static_cast<uint16_t *>(out)[at] = to_bf16(value);
    else static_cast<float *>(out)[at] = value;
  };
  // The region in W's own (row-major) terms: rows [r0, r1) and columns [c0, c1) of W.
  const int64_t r0 = region.column_major ? region.y0 : region.x0, r1 = r0 + (region.column_major ? region.ny : region.nx);
  const int64_t c0 = region.column_major ? region.x0 : region.y0, c1 = c0 + (region.column_major ? region.nx : region.ny);
  const int64_t numel = rows * cols;
  const int64_t first = (r0 * cols + c0) / kPiece, last = ((r1 - 1) * cols + c1 - 1) / kPiece;
  parallel_chunks(last - first + 1, [&](int64_t i) {
    const int64_t piece = first + i, lo = piece * kPiece, hi = std::min(numel, lo + kPiece);
    const float *values = draw_piece(seed, std, numel, piece);
    for (int64_t r = std::max(r0, lo / cols); r < std::min(r1, (hi + cols - 1) / cols); ++r) {
      const int64_t from = std::max({c0, lo - r * cols, int64_t(0)}), to = std::min({c1, hi - r * cols, cols});
      for (int64_t c = from; c < to; ++c) {
        const int64_t at = region.column_major ? (c - c0) * region.ny + (r - r0) : (r - r0) * region.ny + (c - c0);
        put(at, values[r * cols + c - lo]);
      }
    }
  });
}

torch::Tensor random_normal(const std::vector<int64_t> &sizes, double std, torch::Dtype dtype) {
  const uint64_t seed = draw_init_seed();
  torch::Tensor value = torch::empty(sizes, torch::TensorOptions().dtype(dtype));
  const auto [rows, cols] = matrix_shape(value);
  fill_normal(seed, std, rows, cols, StoredRegion{false, 0, rows, 0, cols}, value.view({-1}));
  return value;
}

}  // namespace zf
