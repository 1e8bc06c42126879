#include "update/column_selection.hpp"

#include "update/zenflow_options.hpp"

#include <algorithm>
#include <cmath>

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

ShardElements shard_elements(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end) {
  ShardElements out;
  out.numel = shard_end - shard_begin;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    const uint64_t lo = std::max(seg.offset, shard_begin), hi = std::min(seg.offset + seg.numel, shard_end);
    if (lo >= hi) continue;
    out.matrix += hi - lo;
    if (seg.flags & ZF_SEGMENT_TRANSPOSED) out.tables += hi - lo;
  }
  return out;
}

uint64_t selected_numel(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end, double topk,
                        bool tables_whole) {
  auto inside = [&](uint64_t lo, uint64_t hi) {
    lo = std::max(lo, shard_begin);
    hi = std::min(hi, shard_end);
    return lo < hi ? hi - lo : 0;
  };
  uint64_t selected = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) {  // as make_selection: with its padding, the ends of the shard
      const uint64_t lo = i == 0 ? 0 : seg.offset;
      const uint64_t hi = i + 1 < layout.segment_count ? layout.segments[i + 1].offset
                                                       : std::max(shard_end, seg.offset + seg.numel);
      selected += inside(lo, hi);
      continue;
    }
    const uint64_t here = inside(seg.offset, seg.offset + seg.numel);
    if (here == 0) continue;
    if (tables_whole && (seg.flags & ZF_SEGMENT_TRANSPOSED)) {
      selected += here;
      continue;
    }
    const uint64_t keep = std::clamp<uint64_t>(uint64_t(std::ceil(topk * double(seg.cols) - 1e-9)), 1, seg.cols);
    selected += here == seg.numel ? keep * seg.rows
                                  : std::min(here, uint64_t(std::ceil(double(keep) / double(seg.cols) * double(here))));
  }
  return selected;
}

SelectedElementBytes selected_element_bytes(uint64_t master_and_state, uint64_t compute_bytes) {
  return {master_and_state + 8 + (compute_bytes != 4 ? compute_bytes : 0), compute_bytes};
}

AutoTopk auto_topk(const ShardElements &shard, uint64_t fits) {
  const uint64_t others = shard.numel - shard.matrix, weights = shard.matrix - shard.tables;
  AutoTopk out;
  out.topk = weights == 0 ? 1.0 : (double(fits) - double(others + shard.tables)) / double(weights);
  out.table_rows = shard.tables > 0 && out.topk < kMinAutoTopk;
  if (out.table_rows) out.topk = (double(fits) - double(others)) / double(shard.matrix);
  out.topk = std::clamp(out.topk, kMinAutoTopk, 1.0);
  return out;
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
