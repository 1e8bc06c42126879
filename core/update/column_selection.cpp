#include "update/column_selection.hpp"

#include <algorithm>

namespace zf {

uint32_t column_count(const zf_layout &layout, uint32_t flag) {
  uint64_t columns = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i)
    if (layout.segments[i].flags & flag) columns += layout.segments[i].cols;
  return uint32_t(columns);
}

void select_whole_tables(const zf_layout &layout, std::vector<uint8_t> &mask) {
  uint64_t column = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    if (seg.flags & ZF_SEGMENT_TRANSPOSED) std::fill_n(mask.begin() + int64_t(column), seg.cols, uint8_t(1));
    column += seg.cols;
  }
}

void split_mask(const zf_layout &layout, const std::vector<uint8_t> &mask, uint8_t *weights, uint8_t *tables) {
  uint64_t column = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    uint8_t *&to = (seg.flags & ZF_SEGMENT_TRANSPOSED) ? tables : weights;
    to = std::copy_n(mask.begin() + int64_t(column), seg.cols, to);
    column += seg.cols;
  }
}

std::vector<uint8_t> join_mask(const zf_layout &layout, const uint8_t *weights, const uint8_t *tables) {
  std::vector<uint8_t> mask;
  mask.reserve(column_count(layout));
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    const uint8_t *&from = (seg.flags & ZF_SEGMENT_TRANSPOSED) ? tables : weights;
    mask.insert(mask.end(), from, from + seg.cols);
    from += seg.cols;
  }
  return mask;
}

Selection make_selection(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end, std::vector<uint8_t> mask) {
  Selection s;
  s.mask = std::move(mask);
  auto to_device = [&](uint64_t lo, uint64_t hi, uint32_t group) {
    lo = std::max(lo, shard_begin);
    hi = std::min(hi, shard_end);
    if (lo >= hi) return;
    s.device_numel += hi - lo;
    append_range(s.device, lo - shard_begin, hi - shard_begin, group);
  };
  auto to_host = [&](uint64_t lo, uint64_t hi, uint32_t group) {
    lo = std::max(lo, shard_begin);
    hi = std::min(hi, shard_end);
    if (lo < hi) append_range(s.host, lo - shard_begin, hi - shard_begin, group);
  };
  uint64_t column = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    // As optimizer_ranges: the first segment takes the shard's leading elements, padding after a
    // segment belongs to it, and the last runs to the shard's end.
    uint64_t lo = i == 0 ? 0 : seg.offset;
    uint64_t hi = i + 1 < layout.segment_count ? layout.segments[i + 1].offset : std::max(shard_end, seg.offset + seg.numel);
    uint32_t group = (seg.flags & ZF_SEGMENT_NO_DECAY) ? 1 : 0;
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) {
      to_device(lo, hi, group);
      continue;
    }
    to_host(lo, seg.offset, group);
    uint64_t first = seg.offset >= shard_begin ? 0 : (shard_begin - seg.offset) / seg.rows;
    for (uint64_t c = first; c < seg.cols; ++c) {
      uint64_t begin = seg.offset + c * seg.rows;
      if (begin >= shard_end) break;
      if (s.mask[column + c]) to_device(begin, begin + seg.rows, group);
      else to_host(begin, begin + seg.rows, group);
    }
    to_host(seg.offset + seg.numel, hi, group);
    column += seg.cols;
  }
  return s;
}

bool auto_update_due(const zf_layout &layout, const std::vector<uint8_t> &mask, const std::vector<float> &step_scores,
                     const std::vector<float> &accumulated_scores, double auto_ratio) {
  uint64_t column = 0, weights = 0, heavier = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    double selected = 0, other = 0;
    bool any_selected = false, any_other = false;
    for (uint64_t c = column; c < column + seg.cols; ++c) {
      if (mask[c]) {
        selected += step_scores[c];
        any_selected = true;
      } else {
        other += accumulated_scores[c];
        any_other = true;
      }
    }
    column += seg.cols;
    if (!any_selected || !any_other) continue;
    ++weights;
    if (other > selected) ++heavier;
  }
  return weights == 0 || double(heavier) >= auto_ratio * double(weights);
}

}  // namespace zf
