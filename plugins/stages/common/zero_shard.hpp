// zero_shard.hpp: what the ZeRO stages (zero1, zero2, zero3) share. The flat buffer is padded to
// world_size equal shards; rank r owns elements [r * S, (r + 1) * S). Everything here works on
// host and device buffers alike: copies and sums go through the host (ABI 1.2) on the stream the
// entry was given, and staging lives where the data does.
#pragma once

#include <zf/zf_plugin.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace zf::zero {

// Elements per rank: ceil(numel / world), rounded up to the layout's alignment so every shard
// starts aligned. Any world size works; the last shards may be mostly padding.
inline uint64_t shard_numel(uint64_t numel, uint64_t world, uint64_t alignment) {
  uint64_t per_rank = (numel + world - 1) / world;
  if (alignment > 1) per_rank = (per_rank + alignment - 1) / alignment * alignment;
  return std::max<uint64_t>(per_rank, alignment ? alignment : 1);
}

inline void plan_shard(const zf_host *host, const zf_layout *layout, zf_stage_plan *plan, uint64_t *shard) {
  *shard = shard_numel(layout->numel, uint64_t(host->world_size), layout->alignment);
  plan->shard_begin = uint64_t(host->rank) * *shard;
  plan->shard_end = plan->shard_begin + *shard;
  plan->padded_numel = *shard * uint64_t(host->world_size);
}

// Knobs every ZeRO stage reads (DeepSpeed's names; sizes in elements).
struct Knobs {
  uint64_t reduce_bucket_size = 0;
  uint64_t allgather_bucket_size = 0;
  bool overlap_comm = true;
  bool contiguous_gradients = true;
};

inline Knobs read_knobs(const zf::Config &cfg) {
  Knobs knobs;
  knobs.reduce_bucket_size = uint64_t(cfg.integer("reduce_bucket_size"));
  knobs.allgather_bucket_size = uint64_t(cfg.integer("allgather_bucket_size"));
  knobs.overlap_comm = cfg.boolean("overlap_comm");
  knobs.contiguous_gradients = cfg.boolean("contiguous_gradients");
  return knobs;
}

// The knobs zero1-zero3 share (zero0 takes reduce_bucket_size and overlap_comm).
inline constexpr zf_param_decl kReduceBucketSize = zf::param_int(
    "reduce_bucket_size", "500000000", "elements reduced per gradient collective (all ranks' parts together)",
    zf::above(0));
inline constexpr zf_param_decl kAllgatherBucketSize = zf::param_int(
    "allgather_bucket_size", "500000000",
    "elements per owner broadcast of zero3's gathers (zero1/zero2 gather whole shards in place; accepted there for "
    "DeepSpeed configs)",
    zf::above(0));
inline constexpr zf_param_decl kOverlapComm = zf::param_bool(
    "overlap_comm", "true",
    "start gradient reduction in the backward hooks (CPU: collectives block, so this only moves them)");
inline constexpr zf_param_decl kContiguousGradients = zf::param_bool(
    "contiguous_gradients", "true",
    "gradients live in one flat buffer (always so in zfcore; accepted for DeepSpeed configs)");
#define ZF_ZERO_COMMON_PARAMS kReduceBucketSize, kAllgatherBucketSize, kOverlapComm, kContiguousGradients

// The stages copy and sum through the host (ABI 1.2), so that device buffers work as host ones.
inline zf_status require_abi_1_2(const zf_host *host, const char *stage, zf_error *error) {
  if (host->struct_size >= offsetof(zf_host, accumulate) + sizeof(void *) && host->copy && host->accumulate)
    return ZF_OK;
  return zf::fail(error, ZF_ERROR_UNSUPPORTED, "%s needs a host with plugin ABI 1.2 or newer (copy, accumulate)", stage);
}

// zero1 and zero2 gather the parameter shards in place (all_gather_shards), which a host of plugin
// ABI 1.10 or newer does.
inline zf_status require_abi_1_10(const zf_host *host, const char *stage, zf_error *error) {
  if (zf_status status = require_abi_1_2(host, stage, error); status != ZF_OK) return status;
  if (ZF_ABI_MINOR_OF(host->abi_version) >= 10) return ZF_OK;
  return zf::fail(error, ZF_ERROR_UNSUPPORTED, "%s needs a host with plugin ABI 1.10 or newer (all_gather in place)",
                  stage);
}

// dst = src (same numel and dtype), in stream order.
inline zf_status copy(const zf_host *host, const zf_tensor_view &dst, const zf_tensor_view &src, void *stream,
                      zf_error *error) {
  return host->copy(host, dst, src, stream, error);
}

// The view of numel elements of like's dtype and device at data.
inline zf_tensor_view view_at(const zf_tensor_view &like, void *data, uint64_t numel) {
  zf_tensor_view v = like;
  v.data = data;
  v.numel = numel;
  return v;
}

// Element `element` of view.
inline char *element_at(const zf_tensor_view &view, uint64_t element) {
  return static_cast<char *>(view.data) + element * zf::dtype_size(view.dtype);
}

// A buffer where the data lives (host memory, or the device's for device data) that grows to
// the largest bucket seen, once, accounted under tag.
class Staging {
 public:
  Staging(const zf_host *host, const char *tag) : host_(host), tag_(tag) {}
  Staging(const Staging &) = delete;
  Staging &operator=(const Staging &) = delete;
  ~Staging() {
    if (data_) host_->mem_free(host_, data_);
  }
  // Room for numel elements like `like` (its dtype, on its device).
  zf_status reserve(const zf_tensor_view &like, uint64_t numel, zf_error *error) {
    uint64_t bytes = numel * zf::dtype_size(like.dtype);
    if (bytes <= bytes_) return ZF_OK;
    if (data_) host_->mem_free(host_, data_);
    zf_tier tier = like.device == ZF_DEVICE_CPU ? ZF_TIER_HOST : ZF_TIER_DEVICE;
    data_ = static_cast<char *>(host_->mem_alloc(host_, tier, bytes, tag_, error));
    bytes_ = data_ ? bytes : 0;
    return data_ ? ZF_OK : ZF_ERROR_OUT_OF_MEMORY;
  }
  char *data() const { return data_; }
  // Gives the memory back; work queued on the allocating stream keeps it until it is done.
  void release() {
    if (data_) host_->mem_free(host_, data_);
    data_ = nullptr;
    bytes_ = 0;
  }

 private:
  const zf_host *host_;
  const char *tag_;
  char *data_ = nullptr;
  uint64_t bytes_ = 0;
};

// The in-place all-gather of whole shards and the bucketed all-reduce; device work is queued on
// `stream`.
class Collectives {
 public:
  Collectives(const zf_host *host, uint64_t shard, const Knobs &knobs) : host_(host), shard_(shard), knobs_(knobs) {}

  // After it, every rank holds every rank's shard of params (padded to world x shard elements):
  // one collective in place (host ABI 1.10), with no staging and no copies; nothing to do on one
  // rank. Runs after the optimizer step, on `stream`.
  zf_status all_gather_shards(const zf_tensor_view &params, void *stream, zf_error *error) {
    if (host_->world_size == 1) return ZF_OK;
    zf_tensor_view mine = view_at(params, element_at(params, uint64_t(host_->rank) * shard_), shard_);
    return host_->all_gather(host_, mine, view_at(params, params.data, shard_ * uint64_t(host_->world_size)), stream,
                             error);
  }

  // Bucketed all-reduce of the elements [begin, end), in place.
  zf_status all_reduce(const zf_tensor_view &grads, uint64_t begin, uint64_t end, void *stream, zf_error *error) {
    uint64_t step = std::max<uint64_t>(1, knobs_.reduce_bucket_size);
    for (uint64_t a = begin; a < end; a += step) {
      zf_tensor_view part = view_at(grads, element_at(grads, a), std::min(step, end - a));
      zf_status status = host_->all_reduce(host_, part, ZF_REDUCE_SUM, stream, error);
      if (status != ZF_OK) return status;
    }
    return ZF_OK;
  }

 private:
  const zf_host *host_;
  uint64_t shard_;
  Knobs knobs_;
};

// Gradient all-reduce during the backward, for the stages whose host keeps the whole gradient
// buffer (zero0, zero1: they wire no reduce_block): after block b's backward (on the last
// micro-step) the gradients of blocks b.. are final, and once a bucket's worth
// (reduce_bucket_size elements) of them is, elements [from, end) are summed on every rank.
// finish() reduces what is left. With the host's communication stream, this runs beside the
// backward of the blocks before.
class BackwardReducer {
 public:
  BackwardReducer(const zf_host *host, Collectives &comm, const Knobs &knobs)
      : host_(host), comm_(comm), knobs_(knobs) {}

  zf_status after_backward(uint32_t block, const zf_step_buffers &buffers, zf_error *error) {
    if (host_->world_size == 1 || !knobs_.overlap_comm) return ZF_OK;
    if (buffers.micro_step + 1 != buffers.micro_steps) return ZF_OK;  // still accumulating
    // Blocks run backward last to first: blocks block.. are final (a tied weight belongs to the
    // block whose backward comes last). What is reduced is the end of the buffer down to the
    // lowest of them below which no earlier block lies (all of them in the model's block order;
    // with the blocks interleaved, the top of the buffer until an earlier block).
    const zf_layout &layout = *buffers.layout;
    uint64_t final_from = block == 0 ? 0 : final_suffix(layout, block);
    uint64_t pending_end = pending_end_of(buffers.grads);
    if (final_from >= pending_end) return ZF_OK;
    uint64_t bucket = std::max<uint64_t>(1, knobs_.reduce_bucket_size);
    if (block != 0 && pending_end - final_from < bucket) return ZF_OK;  // wait for a full bucket
    return reduce_down_to(buffers, final_from, error);
  }

  zf_status finish(const zf_step_buffers &buffers, zf_error *error) {
    if (host_->world_size == 1) return ZF_OK;
    zf_status status = reduce_down_to(buffers, 0, error);
    pending_end_ = kUnset;  // the next step starts unreduced
    return status;
  }

 private:
  static constexpr uint64_t kUnset = ~uint64_t(0);
  // The lowest offset from which every block up to the layout's end is `block` or later: the
  // blocks walked down from the top of the buffer until an earlier one.
  static uint64_t final_suffix(const zf_layout &layout, uint32_t block) {
    std::vector<std::pair<uint64_t, uint32_t>> by_offset;  // (offset, block), the blocks with parameters
    for (uint32_t b = 0; b < layout.block_count; ++b)
      if (layout.blocks[b].segment_count) by_offset.emplace_back(layout.blocks[b].offset, b);
    std::sort(by_offset.rbegin(), by_offset.rend());
    uint64_t from = layout.numel;
    for (const auto &[offset, b] : by_offset) {
      if (b < block) break;
      from = offset;
    }
    return from;
  }
  uint64_t pending_end_of(const zf_tensor_view &grads) const {
    return pending_end_ != kUnset ? pending_end_ : grads.numel;
  }

  // Reduces the range [from, pending end) and marks it done.
  zf_status reduce_down_to(const zf_step_buffers &buffers, uint64_t from, zf_error *error) {
    uint64_t end = pending_end_of(buffers.grads);
    if (from >= end) return ZF_OK;
    zf_status status = comm_.all_reduce(buffers.grads, from, end, buffers.stream, error);
    if (status == ZF_OK) pending_end_ = from;
    return status;
  }

  const zf_host *host_;
  Collectives &comm_;
  Knobs knobs_;
  uint64_t pending_end_ = kUnset;  // elements [pending_end_, end) are reduced this step
};

// Sharded gradients (host ABI 1.1, reduce_block): after each block's backward, the block's
// gradients are summed over ranks straight into the owners' shards. A block's range crosses one
// or more shards unevenly, so each owner receives its part with one reduce (to that owner), in
// pieces of reduce_bucket_size elements. On the first micro-step the owner's shard holds zeros
// there (ABI 1.6), so the reduce writes into it; later micro-steps receive into a staging buffer
// and add it to the shard (accumulating), and release_staging() gives that back after the step.
// A shard wider than the block's gradients (F32 beside bf16 ones: train.grad_accum_dtype =
// "float32") gets each piece widened first ("reduce_fp32"): the sum over ranks and micro-steps is
// taken in fp32, as DeepSpeed's and FSDP2's fp32 reduce-scatter take it.
class BlockReducer {
 public:
  BlockReducer(const zf_host *host, uint64_t shard, const Knobs &knobs)
      : host_(host), shard_(shard), knobs_(knobs), staging_(host, "reduce_staging"), widened_(host, "reduce_fp32"),
        write_first_(ZF_ABI_MINOR_OF(host->abi_version) >= 6) {}

  zf_status reduce_block(uint32_t block, const zf_step_buffers &buffers, zf_error *error) {
    if (buffers.struct_size < offsetof(zf_step_buffers, block_grads) + sizeof(zf_tensor_view))
      return zf::fail(error, ZF_ERROR_UNSUPPORTED, "reduce_block needs a host with plugin ABI 1.1 or newer");
    bool has_reduce = host_->struct_size >= offsetof(zf_host, reduce) + sizeof(void *) && host_->reduce;
    if (world() > 1 && !has_reduce)
      return zf::fail(error, ZF_ERROR_UNSUPPORTED, "the host has no reduce collective (plugin ABI 1.1)");
    const zf_block &b = buffers.layout->blocks[block];
    const zf_tensor_view &grads = buffers.block_grads;
    uint64_t piece = std::max<uint64_t>(1, knobs_.reduce_bucket_size);
    for (uint64_t owner = b.offset / shard_; owner < world() && owner * shard_ < b.offset + b.numel; ++owner) {
      uint64_t lo = std::max(b.offset, owner * shard_), hi = std::min(b.offset + b.numel, (owner + 1) * shard_);
      for (uint64_t at = lo; at < hi; at += piece) {
        zf_tensor_view send = view_at(grads, element_at(grads, at - b.offset), std::min(piece, hi - at));
        if (buffers.grad_shard.dtype != grads.dtype) {  // widened to the shard's dtype, exactly
          zf_tensor_view wide = send;
          wide.dtype = buffers.grad_shard.dtype;
          zf_status status = widened_.reserve(wide, send.numel, error);
          if (status != ZF_OK) return status;
          wide.data = widened_.data();
          status = copy(host_, wide, send, buffers.stream, error);
          if (status != ZF_OK) return status;
          send = wide;
        }
        const bool owned = owner == uint64_t(host_->rank);
        zf_tensor_view mine = owned ? view_at(buffers.grad_shard, element_at(buffers.grad_shard, at - owner * shard_),
                                              send.numel)
                                    : send;  // a reduce's recv is ignored off its root
        zf_tensor_view sum = send;  // one rank: its own gradients are the sum
        if (world() > 1) {
          const bool straight = buffers.micro_step == 0 && write_first_;
          if (!straight) {
            zf_status status = staging_.reserve(send, send.numel, error);
            if (status != ZF_OK) return status;
            sum.data = staging_.data();
          }
          zf_status status = host_->reduce(host_, send, straight ? mine : sum, ZF_REDUCE_SUM, int32_t(owner),
                                           buffers.stream, error);
          if (status != ZF_OK) return status;
          if (straight) continue;
        }
        if (!owned) continue;
        zf_status status = host_->accumulate(host_, mine, sum, buffers.stream, error);
        if (status != ZF_OK) return status;
      }
    }
    return ZF_OK;
  }

  // After the step's last reduce_block (from reduce_gradients, in stream order after them).
  void release_staging() {
    staging_.release();
    widened_.release();
  }

 private:
  uint64_t world() const { return uint64_t(host_->world_size); }
  const zf_host *host_;
  uint64_t shard_;
  Knobs knobs_;
  Staging staging_;
  Staging widened_;  // a piece of a block's gradients in the shard's wider dtype
  bool write_first_;  // the host zeroes the shard before a step's first reduce (ABI 1.6)
};

}  // namespace zf::zero
