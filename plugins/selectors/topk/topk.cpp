// topk_l1 and topk_l2: ZenFlow's column selectors (one source, ZF_TOPK_NORM = 1 or 2).
// score: for every column of the MATRIX weights, the L1 norm (topk_l1, the score of DeepSpeed's
// ZenFlow) or the squared L2 norm (topk_l2, the paper's proxy) of its gradient elements inside this
// rank's shard, on the gradients' device; the host sums the ranks' vectors, so a column that
// straddles two shards is scored whole. select: per weight, the ceil(topk_ratio x cols) columns
// with the largest scores (ties toward the lower column, so every rank chooses the same).
#include <zf/zf_plugin.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#ifdef ZF_TOPK_CUDA
#include "column_scores.hpp"
#endif

#if ZF_TOPK_NORM == 1
#define ZF_TOPK_NAME "topk_l1"
#define ZF_TOPK_DOC "ZenFlow's columns: the top-k gradient columns of each weight by L1 norm"
#else
#define ZF_TOPK_NAME "topk_l2"
#define ZF_TOPK_DOC "ZenFlow's columns: the top-k gradient columns of each weight by squared L2 norm"
#endif

namespace {

constexpr bool kSquared = ZF_TOPK_NORM == 2;

zf_status create(const zf_host *, const zf_config *, zf_object **out, zf_error *) {
  static int instance;  // stateless
  *out = reinterpret_cast<zf_object *>(&instance);
  return ZF_OK;
}

void destroy(zf_object *) {}

zf_status cpu_scores(const zf_select_args *args, float *out) {
  const uint64_t begin = args->grad_offset, end = begin + args->grads.numel;
  uint64_t column = 0;
  for (uint32_t s = 0; s < args->layout->segment_count; ++s) {
    const zf_segment &seg = args->layout->segments[s];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    const bool by_column = seg.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS;
    for (uint64_t c = 0; c < seg.cols; ++c) {
      // Element (r, c) of W is at offset + c*rows + r (column-contiguous) or offset + r*cols + c.
      double sum = 0;
      for (uint64_t r = 0; r < seg.rows; ++r) {
        uint64_t at = seg.offset + (by_column ? c * seg.rows + r : r * seg.cols + c);
        if (at < begin || at >= end) continue;
        float g = zf::load_float(args->grads, at - begin);
        sum += kSquared ? double(g) * g : std::fabs(g);
      }
      out[column + c] = float(sum);
    }
    column += seg.cols;
  }
  return ZF_OK;
}

zf_status score(zf_object *, const zf_select_args *args, zf_tensor_view scores, zf_error *error) {
  if (scores.dtype != ZF_DTYPE_F32 || scores.numel != args->column_count)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "scores must be F32 with one value per column");
  if (args->grads.device == ZF_DEVICE_CPU) return cpu_scores(args, static_cast<float *>(scores.data));
#ifdef ZF_TOPK_CUDA
  if (const char *why = topk::cuda_column_scores(args, scores, kSquared))
    return zf::fail(error, ZF_ERROR, "scoring the columns on the GPU: %s", why);
  return ZF_OK;
#else
  return zf::fail(error, ZF_ERROR_UNSUPPORTED, "this build has no CUDA path for GPU gradients");
#endif
}

zf_status select(zf_object *, const zf_select_args *args, zf_tensor_view scores, zf_tensor_view mask,
                 zf_error *error) {
  if (mask.dtype != ZF_DTYPE_U8 || mask.numel != args->column_count || mask.device != ZF_DEVICE_CPU ||
      scores.device != ZF_DEVICE_CPU)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "scores and mask must be host views of %u columns",
                    args->column_count);
  const double ratio = ZF_HAS(zf_select_args, args, topk_ratio) && args->topk_ratio > 0 ? args->topk_ratio : 0.1;
  const auto *score_of = static_cast<const float *>(scores.data);
  auto *chosen = static_cast<uint8_t *>(mask.data);
  uint64_t first = 0;
  std::vector<uint64_t> order;
  for (uint32_t s = 0; s < args->layout->segment_count; ++s) {
    const zf_segment &seg = args->layout->segments[s];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    order.resize(seg.cols);
    std::iota(order.begin(), order.end(), first);
    const uint64_t keep = std::clamp<uint64_t>(uint64_t(std::ceil(ratio * double(seg.cols) - 1e-9)), 1, seg.cols);
    auto before = [&](uint64_t a, uint64_t b) { return score_of[a] > score_of[b] || (score_of[a] == score_of[b] && a < b); };
    std::nth_element(order.begin(), order.begin() + long(keep - 1), order.end(), before);
    for (uint64_t i = 0; i < seg.cols; ++i) chosen[order[i]] = i < keep ? 1 : 0;
    first += seg.cols;
  }
  return ZF_OK;
}

const zf_selector_api api = {sizeof(zf_selector_api), create, destroy, score, select};

const zf_descriptor descriptor = {.struct_size = sizeof(zf_descriptor),
                                  .abi_version = ZF_ABI_VERSION,
                                  .name = ZF_TOPK_NAME,
                                  .kind = ZF_KIND_SELECTOR,
                                  .version = "1.0.0",
                                  .description = ZF_TOPK_DOC,
                                  .capabilities = ZF_CAP_CPU | ZF_CAP_CUDA | ZF_CAP_SCORES,
                                  .api = &api};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
