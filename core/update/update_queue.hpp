// update_queue.hpp: the order in which the update thread takes a step's buckets.
//
// The backward makes the last blocks' gradients final first; the next forward reads the first
// blocks first and, where the update is slower than the backward, waits for it block by block.
// Taken in the order they landed, the buckets left when the backward ends are the first blocks
// only: the update then ends in the middle of the depth, and the next forward runs every later
// block (updated during the backward) before the next backward's first gradients reach the idle
// update thread. So while the backward goes on the thread takes the newest bucket that has landed,
// which leaves buckets of every depth behind it; after the backward it takes the rest in the
// forward's order, and its last bucket is one of the deepest blocks'. The next forward follows it
// block by block, and the next backward's first gradients come right after its end. Adam and its
// kin update each element alone: any order gives the same bits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace zf {

struct UpdateBucket {
  uint64_t begin, end;  // shard elements
  void *landed;         // event: its gradients are on the host (NULL: already there)
  uint64_t sequence;    // handed over as the sequence-th bucket of the step
  uint32_t block;       // the block of its first element: its place in the next forward
};

class UpdateQueue {
 public:
  // A new step. newest_first = false takes them in the order handed over until backward_over():
  // a ZenFlow job (all of it lands at once) and disk tiles (the read-ahead follows that order).
  void start(bool newest_first);
  void push(const UpdateBucket &bucket);
  // The backward is over: the rest goes in the forward's order.
  void backward_over();
  bool empty() const { return queue_.empty(); }
  void clear() { queue_.clear(), landed_ = 0; }
  // The next bucket, removed from the queue: while newest-first, the newest of those handed over
  // before the first that has not landed (has_landed; they land in the order handed over), or the
  // oldest when none has; otherwise the first.
  UpdateBucket take(const std::function<bool(const UpdateBucket &)> &has_landed);

 private:
  std::vector<UpdateBucket> queue_;  // handed over and not taken, in order
  size_t landed_ = 0;                // queue_[0, landed_) have landed
  bool newest_first_ = false;
};

}  // namespace zf
