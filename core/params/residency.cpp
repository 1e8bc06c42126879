#include "params/residency.hpp"

#include "runtime/device.hpp"

#include <cstring>

namespace zf {

zf_step_buffers on_comm_stream(const Runtime &runtime, zf_step_buffers buffers) {
  if (!runtime.comm_stream) return buffers;
  stream_wait(runtime.comm_stream, runtime.compute_stream);
  buffers.stream = runtime.comm_stream;
  return buffers;
}

Residency::Residency(const StagePlugin &stage, Runtime &runtime, FlatBuffers &flat, const Model &model, zf_tier tier,
                     StepBuffers buffers)
    : stage_(stage), runtime_(runtime), flat_(flat), model_(model), tier_(tier), buffers_(std::move(buffers)) {}

void Residency::shard(uint64_t store_begin, torch::Tensor store, bool whole, torch::Dtype dtype,
                      std::vector<uint8_t> resident, uint64_t prefetch_numel, bool stage_gathers) {
  sharded_ = std::make_unique<ShardedParameters>(flat_, runtime_.memory, tier_, dtype, store_begin, std::move(store),
                                                 std::move(resident));
  whole_ = whole;
  gathered_.assign(sharded_->block_count(), nullptr);
  stale_.assign(sharded_->block_count(), 0);
  gathers_.assign(sharded_->block_count(), 0);
  users_.assign(sharded_->block_count(), {});
  for (uint32_t block = 0; block < sharded_->block_count(); ++block)
    for (uint32_t b : needed_by(block)) users_[b].push_back(block);
  prefetch_numel_ = prefetch_numel;
  stage_gathers_ = stage_gathers;
  gather_resident(0);
}

torch::Tensor Residency::stored(uint64_t begin, uint64_t end) const {
  return sharded_->store.narrow(0, int64_t(begin - sharded_->store_begin), int64_t(end - begin));
}

torch::Tensor Residency::whole() const { return sharded_ && whole_ ? sharded_->store : torch::Tensor(); }

// Gathers on the communication stream. The compute stream waits for the block's parameters now,
// or, gathered ahead (prefetch), when the block is entered.
void Residency::gather_block(uint32_t block, int64_t step, bool ahead) {
  wait_for_update(block);
  stale_[block] = 0;
  sharded_->hold(block);
  ++gathers_[block];
  zf_step_buffers b = on_comm_stream(runtime_, buffers_(step));
  Timers &timers = runtime_.timers;
  uint32_t timer = timers.id("param_gather");  // gathering a block's parameters (GPU: comm stream)
  timers.start(timer, b.stream);
  b.block_params = sharded_->block_view(block);
  if (stage_gathers_) {
    stage_.gather_block(block, b);
  } else {  // parameter offload: the store holds every block
    const zf_block &range = flat_.layout().blocks[block];
    torch::Tensor from = stored(range.offset, range.offset + range.numel);
    const uint64_t bytes = range.numel * from.element_size();
    if (b.block_params.device == ZF_DEVICE_CPU) std::memcpy(b.block_params.data, from.data_ptr(), bytes);
    else device_copy(b.block_params.data, from.data_ptr(), bytes, b.stream);
  }
  timers.stop(timer, b.stream);
  void *gathered = record_event(runtime_.comm_stream);
  if (ahead) gathered_[block] = gathered;
  else wait_event(runtime_.compute_stream, gathered);
}

void Residency::wait_for_update(uint32_t block) const {
  const zf_block &range = flat_.layout().blocks[block];
  if (before_read_) before_read_(range.offset, range.offset + range.numel);
}

void Residency::wait_gathered(uint32_t block) {
  wait_event(runtime_.compute_stream, gathered_[block]);
  gathered_[block] = nullptr;
}

std::vector<uint32_t> Residency::needed_by(uint32_t block) const {
  std::vector<uint32_t> needed = {block};
  for (size_t tied : model_.tied_blocks(block)) needed.push_back(uint32_t(tied));
  return needed;
}

void Residency::prefetch_after(uint32_t block, int direction, int64_t step) {
  if (!sharded_ || !runtime_.comm_stream || prefetch_numel_ == 0) return;
  uint64_t ahead = 0;
  for (int64_t next = int64_t(block) + direction; next >= 0 && next < int64_t(sharded_->block_count());
       next += direction) {
    for (uint32_t b : needed_by(uint32_t(next))) {
      if (sharded_->resident(b)) continue;
      if (!sharded_->held(b)) gather_block(b, step, /*ahead=*/true);
      ahead += flat_.layout().blocks[b].numel;
    }
    if (ahead >= prefetch_numel_) break;
  }
}

void Residency::gather_resident(int64_t step, bool lazily) {
  if (!sharded_) return;
  for (uint32_t block = 0; block < sharded_->block_count(); ++block) {
    if (!sharded_->resident(block)) continue;
    if (lazily) stale_[block] = 1;
    else gather_block(block, step, /*ahead=*/false);
  }
}

void Residency::enter(uint32_t block, int64_t step) {
  if (!sharded_) {  // the compute reads the parameters in place
    for (uint32_t b : needed_by(block)) wait_for_update(b);
    return;
  }
  for (uint32_t b : needed_by(block)) {
    if (sharded_->resident(b)) {
      if (stale_[b]) gather_block(b, step, /*ahead=*/false);
      continue;
    }
    if (sharded_->held(b)) wait_gathered(b);
    else gather_block(b, step, /*ahead=*/false);
  }
}

bool Residency::last_use(uint32_t held, uint32_t block, Pass pass) const {
  const std::vector<uint32_t> &users = users_[held];
  switch (pass) {
    case Pass::forward: return users.size() == 1;  // a shared block is read again before its backward
    case Pass::backward: return block == users.front();
    case Pass::inference: return block == users.back();
  }
  return true;
}

void Residency::leave(uint32_t block, Pass pass) {
  if (!sharded_) return;
  for (uint32_t b : needed_by(block)) {
    wait_gathered(b);  // the compute stream frees the memory: no gather may still write it
    if (last_use(b, block, pass)) sharded_->release(b);
  }
}

void Residency::gather_whole_model() {
  if (!sharded_) return;
  for (uint32_t block = 0; block < sharded_->block_count(); ++block) enter(block, 0);
}

}  // namespace zf
