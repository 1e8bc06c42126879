// topk_example: a ZenFlow column selector, written as a third party would: against the SDK only.
// score: the L1 norm of each gradient column's elements (one input channel of W[out, in]) inside
// this rank's gradient view (the host sums the ranks' vectors); select: per weight, the `ratio`
// fraction of columns with the largest scores (ratio = 0: the run's zenflow.topk_ratio).
#include <zf/zf_plugin.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace {

struct TopkExample {
  double ratio;
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] {
    *out = reinterpret_cast<zf_object *>(new TopkExample{zf::Config(host, config).real("ratio")});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<TopkExample *>(object); }

zf_status score(zf_object *, const zf_select_args *args, zf_tensor_view scores, zf_error *error) {
  if (scores.dtype != ZF_DTYPE_F32 || scores.numel != args->column_count)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "scores must be F32 with one value per column");
  if (args->grads.device != ZF_DEVICE_CPU) return zf::fail(error, ZF_ERROR_UNSUPPORTED, "CPU gradients only");
  auto *out = static_cast<float *>(scores.data);
  const uint64_t begin = args->grad_offset, end = begin + args->grads.numel;
  uint64_t column_index = 0;
  for (uint32_t s = 0; s < args->layout->segment_count; ++s) {
    const zf_segment &seg = args->layout->segments[s];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    const bool by_column = seg.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS;
    for (uint64_t c = 0; c < seg.cols; ++c, ++column_index) {
      double sum = 0;
      for (uint64_t r = 0; r < seg.rows; ++r) {
        // Element (r, c) of W lives at offset + c*rows + r (column-contiguous) or offset + r*cols + c.
        uint64_t at = seg.offset + (by_column ? c * seg.rows + r : r * seg.cols + c);
        if (at >= begin && at < end) sum += std::fabs(zf::load_float(args->grads, at - begin));
      }
      out[column_index] = float(sum);
    }
  }
  return ZF_OK;
}

zf_status select(zf_object *object, const zf_select_args *args, zf_tensor_view scores, zf_tensor_view mask,
                 zf_error *error) {
  double ratio = reinterpret_cast<TopkExample *>(object)->ratio;
  if (ratio == 0 && ZF_HAS(zf_select_args, args, topk_ratio)) ratio = args->topk_ratio;  // ABI 1.4
  if (ratio == 0) ratio = 0.1;
  if (mask.dtype != ZF_DTYPE_U8 || mask.numel != args->column_count)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "mask must be U8 with one value per column");
  const auto *score_of = static_cast<const float *>(scores.data);
  auto *chosen = static_cast<uint8_t *>(mask.data);
  uint64_t first_column = 0;
  for (uint32_t s = 0; s < args->layout->segment_count; ++s) {
    const zf_segment &seg = args->layout->segments[s];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    std::vector<uint64_t> order(seg.cols);
    std::iota(order.begin(), order.end(), first_column);
    uint64_t keep = std::max<uint64_t>(1, uint64_t(std::ceil(ratio * double(seg.cols))));
    // Ties break toward the lower column index, so every rank chooses the same columns.
    std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return score_of[a] > score_of[b]; });
    for (uint64_t i = 0; i < seg.cols; ++i) chosen[order[i]] = i < keep ? 1 : 0;
    first_column += seg.cols;
  }
  return ZF_OK;
}

const zf_param_decl params[] = {
    zf::param_float("ratio", "0", "fraction of each weight's columns selected (0 = the run's zenflow.topk_ratio)",
                    zf::between(0, 1)),
};

const zf_selector_api api = {sizeof(zf_selector_api), create, destroy, score, select};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "topk_example", ZF_KIND_SELECTOR, 1, params, "1.0.0",
    "top-k gradient columns by L1 norm (an out-of-tree example)", ZF_CAP_CPU | ZF_CAP_SCORES, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
