#include "engine/finite_values.hpp"

#include "runtime/error.hpp"
#include "runtime/parallel.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace zf {

std::string parameter_at(const zf_layout &layout, uint64_t index) {
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &segment = layout.segments[i];
    if (index >= segment.offset && index < segment.offset + segment.numel)
      return format("'%s' element %llu", segment.name, (unsigned long long)(index - segment.offset));
  }
  return format("element %llu (padding)", (unsigned long long)index);
}

namespace {

// The first element of fp32 values [lo, hi) whose exponent bits are all set (an infinity or a NaN), or -1.
int64_t first_non_finite_fp32(const float *values, int64_t lo, int64_t hi) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t any = 0;
  for (int64_t i = lo; i < hi; ++i) {  // without a branch: vectorised
    uint32_t bits;
    std::memcpy(&bits, values + i, 4);
    any |= uint32_t((bits & kExponent) == kExponent);
  }
  if (!any) return -1;
  for (int64_t i = lo; i < hi; ++i)
    if (!std::isfinite(values[i])) return i;
  return -1;
}

// The index of the first value of `values` that is not finite, or -1. A host fp32 tensor (the master
// and optimizer state of an offloaded run: several GB a rank) is scanned in pieces on the bulk cores:
// torch's isfinite ran on the training thread's one or two cores of a GPU run, 2.1 s of a 5.5 s
// resume of 1.6 GB a rank on a 2-core machine. Elsewhere a slice at a time, so that the check's
// temporaries stay small beside a large shard.
int64_t first_non_finite(const at::Tensor &values) {
  const at::Tensor flat = values.reshape({-1});
  const int64_t n = flat.numel();
  if (flat.device().is_cpu() && flat.scalar_type() == at::kFloat && flat.is_contiguous()) {
    constexpr int64_t kPiece = int64_t(1) << 22;
    std::vector<int64_t> found(size_t((n + kPiece - 1) / kPiece), -1);
    const float *data = flat.data_ptr<float>();
    parallel_chunks(int64_t(found.size()), [&](int64_t p) {
      found[size_t(p)] = first_non_finite_fp32(data, p * kPiece, std::min(n, (p + 1) * kPiece));
    });
    for (int64_t index : found)
      if (index >= 0) return index;
    return -1;
  }
  constexpr int64_t kSlice = int64_t(1) << 26;
  for (int64_t lo = 0; lo < n; lo += kSlice) {
    at::Tensor slice = flat.narrow(0, lo, std::min(kSlice, n - lo));
    if (slice.isfinite().all().item<bool>()) continue;
    return lo + slice.isfinite().logical_not().nonzero()[0][0].item<int64_t>();
  }
  return -1;
}

}  // namespace

std::string local_non_finite(const at::Tensor &values, const std::function<std::string(int64_t)> &where) {
  const int64_t index = first_non_finite(values);
  if (index < 0) return "";
  return format("%s = %g", where(index).c_str(), values.reshape({-1})[index].item<double>());
}

std::string non_finite_parameter(const at::Tensor &values, uint64_t begin, const zf_layout &layout,
                                 Communicator &comm) {
  std::string mine = local_non_finite(values, [&](int64_t i) { return parameter_at(layout, begin + uint64_t(i)); });
  if (!mine.empty()) mine += format(" (rank %d)", comm.rank());
  return first_finding(comm, mine);
}

}  // namespace zf
