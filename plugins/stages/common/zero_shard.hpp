// zero_shard.hpp: what the ZeRO stages (zero1, zero2, zero3) share. The flat buffer is padded to
// world_size equal shards; rank r owns elements [r * S, (r + 1) * S). A bucketed collective moves
// the same relative range [a, a + len) of every rank's shard at once, through a staging buffer
// (the host's collectives do not alias send and receive buffers).
#pragma once

#include <zf/zf_plugin.hpp>

#include <algorithm>
#include <cstring>
#include <string>

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

#define ZF_ZERO_COMMON_PARAMS                                                                                 \
  {"reduce_bucket_size", ZF_PARAM_INT, ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE, "500000000",                \
   "elements reduced per gradient collective (all ranks' parts together)", 0, 0, nullptr, nullptr},          \
      {"allgather_bucket_size", ZF_PARAM_INT, ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE, "500000000",         \
       "elements gathered per parameter all-gather (all ranks' parts together)", 0, 0, nullptr, nullptr},    \
      {"overlap_comm", ZF_PARAM_BOOL, 0, "true",                                                              \
       "start gradient reduction in the backward hooks (CPU: collectives block, so this only moves them)",   \
       0, 0, nullptr, nullptr},                                                                               \
      {"contiguous_gradients", ZF_PARAM_BOOL, 0, "true",                                                      \
       "gradients live in one flat buffer (always so in zfcore; accepted for DeepSpeed configs)", 0, 0,      \
       nullptr, nullptr}

// A host buffer that grows to the largest bucket seen, once, accounted under tag.
class Staging {
 public:
  Staging(const zf_host *host, const char *tag) : host_(host), tag_(tag) {}
  Staging(const Staging &) = delete;
  Staging &operator=(const Staging &) = delete;
  ~Staging() {
    if (data_) host_->mem_free(host_, data_);
  }
  zf_status reserve(zf_dtype dtype, uint64_t numel, zf_error *error) {
    uint64_t bytes = numel * zf::dtype_size(dtype);
    if (bytes <= bytes_) return ZF_OK;
    if (data_) host_->mem_free(host_, data_);
    data_ = static_cast<char *>(host_->mem_alloc(host_, ZF_TIER_HOST, bytes, tag_, error));
    bytes_ = data_ ? bytes : 0;
    return data_ ? ZF_OK : ZF_ERROR_OUT_OF_MEMORY;
  }
  char *data() const { return data_; }

 private:
  const zf_host *host_;
  const char *tag_;
  char *data_ = nullptr;
  uint64_t bytes_ = 0;
};

// Staged, bucketed reduce-scatter and all-gather over the shard-relative range [begin, end).
class Collectives {
 public:
  Collectives(const zf_host *host, uint64_t shard, const Knobs &knobs)
      : host_(host), shard_(shard), knobs_(knobs), staging_(host, "staging") {}

  uint64_t shard() const { return shard_; }

  // After it, rank r's part of every relative element in [begin, end) holds the sum over ranks.
  zf_status reduce_scatter(const zf_tensor_view &grads, uint64_t begin, uint64_t end, zf_error *error) {
    uint64_t world = uint64_t(host_->world_size);
    uint64_t step = std::max<uint64_t>(1, knobs_.reduce_bucket_size / world);
    for (uint64_t a = begin; a < end; a += step) {
      uint64_t len = std::min(step, end - a);
      // Whole shards: the buffer is already in rank order, only the received part is staged.
      bool whole = len == shard_;
      zf_status status = staging_.reserve(grads.dtype, whole ? len : len * (world + 1), error);
      if (status != ZF_OK) return status;
      size_t element = zf::dtype_size(grads.dtype);
      char *send = whole ? static_cast<char *>(grads.data) : staging_.data();
      char *recv = whole ? staging_.data() : staging_.data() + len * world * element;
      for (uint64_t r = 0; r < world && !whole; ++r)
        std::memcpy(send + r * len * element, at(grads, r * shard_ + a), len * element);
      status = host_->reduce_scatter(host_, view(grads, send, len * world), view(grads, recv, len), ZF_REDUCE_SUM,
                                     nullptr, error);
      if (status != ZF_OK) return status;
      std::memcpy(at(grads, uint64_t(host_->rank) * shard_ + a), recv, len * element);
    }
    return ZF_OK;
  }

  // After it, every rank holds every rank's part of the relative elements [begin, end).
  zf_status all_gather(const zf_tensor_view &params, uint64_t begin, uint64_t end, zf_error *error) {
    uint64_t world = uint64_t(host_->world_size);
    uint64_t step = std::max<uint64_t>(1, knobs_.allgather_bucket_size / world);
    for (uint64_t a = begin; a < end; a += step) {
      uint64_t len = std::min(step, end - a);
      // Whole shards: gather straight into the buffer; only this rank's part is staged (the
      // collectives do not alias send and receive).
      bool whole = len == shard_;
      zf_status status = staging_.reserve(params.dtype, whole ? len : len * (world + 1), error);
      if (status != ZF_OK) return status;
      size_t element = zf::dtype_size(params.dtype);
      char *send = staging_.data();
      char *recv = whole ? static_cast<char *>(params.data) : staging_.data() + len * element;
      std::memcpy(send, at(params, uint64_t(host_->rank) * shard_ + a), len * element);
      status = host_->all_gather(host_, view(params, send, len), view(params, recv, len * world), nullptr, error);
      if (status != ZF_OK) return status;
      for (uint64_t r = 0; r < world && !whole; ++r)
        std::memcpy(at(params, r * shard_ + a), recv + r * len * element, len * element);
    }
    return ZF_OK;
  }

  // Plain bucketed all-reduce of the whole buffer, in place.
  zf_status all_reduce(const zf_tensor_view &grads, zf_error *error) {
    for (uint64_t a = 0; a < grads.numel; a += knobs_.reduce_bucket_size) {
      zf_tensor_view part = grads;
      part.data = at(grads, a);
      part.numel = std::min(knobs_.reduce_bucket_size, grads.numel - a);
      zf_status status = host_->all_reduce(host_, part, ZF_REDUCE_SUM, nullptr, error);
      if (status != ZF_OK) return status;
    }
    return ZF_OK;
  }

 private:
  static char *at(const zf_tensor_view &v, uint64_t element) {
    return static_cast<char *>(v.data) + element * zf::dtype_size(v.dtype);
  }
  static zf_tensor_view view(const zf_tensor_view &like, char *data, uint64_t numel) {
    zf_tensor_view v = like;
    v.data = data;
    v.numel = numel;
    return v;
  }
  const zf_host *host_;
  uint64_t shard_;
  Knobs knobs_;
  Staging staging_;  // ledger tag "<stage>.staging"
};

// The gradient side of zero2 and zero3: reduce-scatter during the backward. After block b's
// backward (on the last micro-step) the gradients of blocks b.. are final; every shard-relative
// range whose rank-0 part lies there is reduce-scattered once it fills a bucket
// (reduce_bucket_size elements over all ranks). finish() reduces what is left.
class BackwardReducer {
 public:
  BackwardReducer(const zf_host *host, Collectives &comm, const Knobs &knobs)
      : host_(host), comm_(comm), knobs_(knobs), pending_end_(comm.shard()) {}

  // Both do nothing when the host shards the gradients itself (grads.data == NULL): then
  // BlockReducer does the work in reduce_block.
  zf_status after_backward(uint32_t block, const zf_step_buffers &buffers, zf_error *error) {
    if (host_->world_size == 1 || !knobs_.overlap_comm || !buffers.grads.data) return ZF_OK;
    if (buffers.micro_step + 1 != buffers.micro_steps) return ZF_OK;  // still accumulating
    // Blocks run backward last to first, so every element from the lowest offset of blocks
    // block.. onward is final (a tied weight belongs to the block whose backward comes last).
    const zf_layout &layout = *buffers.layout;
    uint64_t final_from = block == 0 ? 0 : layout.numel;
    for (uint32_t b = block; b < layout.block_count; ++b)
      if (layout.blocks[b].segment_count) final_from = std::min(final_from, layout.blocks[b].offset);
    if (final_from >= pending_end_) return ZF_OK;
    uint64_t bucket = std::max<uint64_t>(1, knobs_.reduce_bucket_size / uint64_t(host_->world_size));
    if (block != 0 && pending_end_ - final_from < bucket) return ZF_OK;  // wait for a full bucket
    return reduce_down_to(buffers.grads, final_from, error);
  }

  zf_status finish(const zf_step_buffers &buffers, zf_error *error) {
    if (host_->world_size == 1 || !buffers.grads.data) return ZF_OK;
    zf_status status = reduce_down_to(buffers.grads, 0, error);
    pending_end_ = comm_.shard();  // the next step starts unreduced
    return status;
  }

 private:
  // Reduce-scatters the relative range [from, pending_end_) and marks it done.
  zf_status reduce_down_to(const zf_tensor_view &grads, uint64_t from, zf_error *error) {
    if (from >= pending_end_) return ZF_OK;
    zf_status status = comm_.reduce_scatter(grads, from, pending_end_, error);
    if (status == ZF_OK) pending_end_ = from;
    return status;
  }

  const zf_host *host_;
  Collectives &comm_;
  Knobs knobs_;
  uint64_t pending_end_;  // shard-relative elements [pending_end_, shard) are reduced this step
};

// Sharded gradients (host ABI 1.1, reduce_block): after each block's backward, the block's
// gradients are summed over ranks straight into the owners' shards. A block's range crosses one
// or more shards unevenly, so each owner receives its part with one reduce (to that owner), in
// pieces of reduce_bucket_size elements, and adds it to its shard (accumulating micro-steps).
class BlockReducer {
 public:
  BlockReducer(const zf_host *host, uint64_t shard, const Knobs &knobs)
      : host_(host), shard_(shard), knobs_(knobs), staging_(host, "reduce_staging") {}

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
        uint64_t len = std::min(piece, hi - at);
        zf_tensor_view send = grads;
        send.data = static_cast<char *>(grads.data) + (at - b.offset) * zf::dtype_size(grads.dtype);
        send.numel = len;
        zf_tensor_view sum = send;  // one rank: its own gradients are the sum
        if (world() > 1) {
          zf_status status = staging_.reserve(grads.dtype, len, error);
          if (status != ZF_OK) return status;
          sum.data = staging_.data();
          status = host_->reduce(host_, send, sum, ZF_REDUCE_SUM, int32_t(owner), buffers.stream, error);
          if (status != ZF_OK) return status;
        }
        if (owner == uint64_t(host_->rank)) add_into(buffers.grad_shard, at - owner * shard_, sum);
      }
    }
    return ZF_OK;
  }

 private:
  uint64_t world() const { return uint64_t(host_->world_size); }

  // shard[offset + i] += values[i], in the compute dtype.
  static void add_into(const zf_tensor_view &shard, uint64_t offset, const zf_tensor_view &values) {
    if (shard.dtype == ZF_DTYPE_F32) {
      float *out = static_cast<float *>(shard.data) + offset;
      const float *in = static_cast<const float *>(values.data);
      for (uint64_t i = 0; i < values.numel; ++i) out[i] += in[i];
      return;
    }
    uint16_t *out = static_cast<uint16_t *>(shard.data) + offset;
    for (uint64_t i = 0; i < values.numel; ++i) {
      float total = zf::load_float(shard, offset + i) + zf::load_float(values, i);
      out[i] = shard.dtype == ZF_DTYPE_BF16 ? zf::float_to_bf16(total) : zf::float_to_f16(total);
    }
  }

  const zf_host *host_;
  uint64_t shard_;
  Knobs knobs_;
  Staging staging_;
};

}  // namespace zf::zero
