#include "params/flat_buffers.hpp"

#include "runtime/error.hpp"

#include <algorithm>

namespace zf {

std::vector<uint32_t> interleaved_block_order(uint32_t blocks) {
  uint32_t bits = 0;
  while ((uint64_t(1) << bits) < blocks) ++bits;
  std::vector<uint32_t> order;
  for (uint64_t i = 0; i < (uint64_t(1) << bits); ++i) {
    uint64_t reversed = 0;
    for (uint32_t k = 0; k < bits; ++k) reversed |= ((i >> k) & 1) << (bits - 1 - k);
    if (reversed < blocks) order.push_back(uint32_t(reversed));
  }
  return order;
}

FlatBuffers::FlatBuffers(std::vector<ModelParameter> parameters, const std::vector<std::string> &block_names,
                         bool column_major, bool interleave_blocks)
    : parameters_(std::move(parameters)), block_names_(block_names) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const ModelParameter &p = parameters_[i];
    ZF_REQUIRE(p.block < block_names_.size(), "internal: parameter %s names block %u of %zu", p.name.c_str(),
               p.block, block_names_.size());
    ZF_REQUIRE(i == 0 || p.block >= parameters_[i - 1].block, "internal: parameters must come in block order (%s)",
               p.name.c_str());
  }
  std::vector<uint32_t> order(block_names_.size());
  for (uint32_t b = 0; b < order.size(); ++b) order[b] = b;
  if (interleave_blocks) order = interleaved_block_order(uint32_t(block_names_.size()));

  // Segments in memory order: block by block in `order`, each block's parameters in the model's order.
  names_.reserve(parameters_.size());
  uint64_t offset = 0;
  for (uint32_t block : order) {
    for (size_t index = 0; index < parameters_.size(); ++index) {
      const ModelParameter &p = parameters_[index];
      if (p.block != block) continue;
      names_.push_back(p.name);
      parameter_of_.push_back(index);
      zf_segment s{};
      s.offset = offset;
      s.numel = uint64_t(p.tensor.numel());
      bool two_d = p.tensor.dim() == 2;
      s.rows = two_d ? uint64_t(p.tensor.size(0)) : s.numel;
      s.cols = two_d ? uint64_t(p.tensor.size(1)) : 1;
      s.block = p.block;
      // A stack [E, in, out] of matrices (gpt-oss's experts) as it lies in memory is W^T of W[out, E x in]
      // stored column by column: a matrix only where the buffers store matrices so; else a vector.
      const bool stack = p.matrix && p.tensor.dim() == 3 && column_major;
      if (stack) s.rows = uint64_t(p.tensor.size(2)), s.cols = s.numel / s.rows;
      const bool matrix = p.matrix && (two_d || stack);
      s.flags = (p.no_decay ? uint32_t(ZF_SEGMENT_NO_DECAY) : 0u) | (matrix ? uint32_t(ZF_SEGMENT_MATRIX) : 0u) |
                (matrix && column_major ? uint32_t(ZF_SEGMENT_COLUMN_CONTIGUOUS) : 0u);
      if (p.table && two_d && column_major) {
        // A lookup table [entries, width] stored row by row is W^T of W[width, entries] stored column
        // by column: selectors see its entries (tokens) as columns, and choose among them.
        std::swap(s.rows, s.cols);
        s.flags |= ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS | ZF_SEGMENT_TRANSPOSED;
      }
      segments_.push_back(s);
      offset += (s.numel + kAlignment - 1) / kAlignment * kAlignment;
    }
  }
  for (size_t i = 0; i < segments_.size(); ++i) segments_[i].name = names_[i].c_str();

  // A block's segments are contiguous in the table; it runs up to the next segment in memory.
  for (uint32_t b = 0; b < block_names_.size(); ++b) {
    zf_block block{};
    block.name = block_names_[b].c_str();
    block.first_segment = uint32_t(segments_.size());
    for (uint32_t i = 0; i < segments_.size(); ++i) {
      if (segments_[i].block != b) continue;
      if (block.segment_count == 0) block.first_segment = i;
      ++block.segment_count;
    }
    const uint32_t after = block.first_segment + block.segment_count;
    block.offset = block.segment_count ? segments_[block.first_segment].offset : offset;
    block.numel = block.segment_count ? (after < segments_.size() ? segments_[after].offset : offset) - block.offset : 0;
    blocks_.push_back(block);
  }

  layout_.struct_size = sizeof(zf_layout);
  layout_.segment_count = uint32_t(segments_.size());
  layout_.segments = segments_.data();
  layout_.block_count = uint32_t(blocks_.size());
  layout_.blocks = blocks_.data();
  layout_.numel = offset;
  layout_.alignment = kAlignment;
}

torch::Tensor FlatBuffers::view_of(const torch::Tensor &flat, size_t index, uint64_t base_offset) const {
  const zf_segment &s = segments_[index];
  torch::Tensor run = flat.narrow(0, int64_t(s.offset - base_offset), int64_t(s.numel));
  return segment_view(run, s, parameters_[parameter_of_[index]].tensor.sizes());
}

void FlatBuffers::materialize(uint64_t numel, torch::Dtype dtype, MemoryLedger &ledger, zf_tier tier,
                              bool with_grads, zf_tier param_tier) {
  allocate_params(numel, dtype, ledger, param_tier == ZF_TIER_COUNT ? tier : param_tier, *current_values(parameters_));
  if (with_grads) allocate_grads(numel, dtype, ledger, tier);
}

void FlatBuffers::allocate_params(uint64_t numel, torch::Dtype dtype, MemoryLedger &ledger, zf_tier tier,
                                  const ParameterSource &values) {
  ZF_REQUIRE(numel >= layout_.numel, "internal: flat buffers smaller than the layout");
  params = ledger_tensor(ledger, tier, numel, dtype, "params", /*zero=*/false);
  fill(values, 0, numel, params);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < segments_.size(); ++i) parameters_[parameter_of_[i]].tensor.set_data(view_of(params, i));
}

void FlatBuffers::allocate_grads(uint64_t numel, torch::Dtype dtype, MemoryLedger &ledger, zf_tier tier) {
  ZF_REQUIRE(numel >= layout_.numel, "internal: flat buffers smaller than the layout");
  grads = ledger_tensor(ledger, tier, numel, dtype, "grads");
  for (size_t i = 0; i < segments_.size(); ++i) parameters_[parameter_of_[i]].tensor.mutable_grad() = view_of(grads, i);
}

void FlatBuffers::fill(const ParameterSource &values, uint64_t begin, uint64_t end, torch::Tensor destination) const {
  ZF_REQUIRE(destination.is_contiguous() && uint64_t(destination.numel()) == end - begin,
             "internal: fill's destination is not [begin, end)");
  torch::NoGradGuard no_grad;
  const bool staged = !destination.is_cpu();
  size_t first = 0;  // the first segment that ends after the chunk's start
  for (uint64_t lo = begin; lo < end;) {
    while (first < segments_.size() && segments_[first].offset + segments_[first].numel <= lo) ++first;
    // A device destination is filled through host memory, a chunk at a time: at least 64 Mi
    // elements, and never part of a segment that goes on (a column-stored tensor's random values
    // come in row-major pieces, so a part of it costs drawing all of it).
    uint64_t hi = end;
    if (staged) {
      hi = std::min(end, lo + (uint64_t(1) << 26));
      for (size_t i = first; i < segments_.size() && segments_[i].offset < hi; ++i)
        hi = std::min(end, std::max(hi, segments_[i].offset + segments_[i].numel));
    }
    torch::Tensor out = staged ? torch::empty({int64_t(hi - lo)}, destination.options().device(torch::kCPU))
                               : destination.narrow(0, int64_t(lo - begin), int64_t(hi - lo));
    uint64_t filled = lo;  // out holds [lo, filled)
    auto zero_to = [&](uint64_t to) {
      if (to > filled) out.narrow(0, int64_t(filled - lo), int64_t(to - filled)).zero_();
      filled = std::max(filled, to);
    };
    for (size_t i = first; i < segments_.size() && segments_[i].offset < hi; ++i) {
      const zf_segment &s = segments_[i];
      const uint64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
      if (a >= b) continue;
      zero_to(a);
      const int64_t width = int64_t((s.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS) ? s.rows : s.cols);
      for_each_region(int64_t(a - s.offset), int64_t(b - s.offset), width, stored_transposed(s),
                      [&](const StoredRegion &region, int64_t offset) {
                        values.fill(parameter_of_[i], region, out.narrow(0, int64_t(a - lo) + offset, region.numel()));
                      });
      filled = b;
    }
    zero_to(hi);
    if (staged) destination.narrow(0, int64_t(lo - begin), int64_t(hi - lo)).copy_(out);
    lo = hi;
  }
}

void FlatBuffers::bind_block(uint32_t block, const torch::Tensor &storage) {
  const zf_block &b = blocks_[block];
  torch::NoGradGuard no_grad;
  for (uint32_t i = b.first_segment; i < b.first_segment + b.segment_count; ++i)
    parameters_[parameter_of_[i]].tensor.set_data(view_of(storage, i, b.offset));
}

void FlatBuffers::bind_block_grads(uint32_t block, const torch::Tensor &storage) {
  const zf_block &b = blocks_[block];
  for (uint32_t i = b.first_segment; i < b.first_segment + b.segment_count; ++i)
    parameters_[parameter_of_[i]].tensor.mutable_grad() = view_of(storage, i, b.offset);
}

}  // namespace zf
