#include "update/update_queue.hpp"

#include <algorithm>
#include <utility>

namespace zf {

void UpdateQueue::start(bool newest_first) {
  clear();
  newest_first_ = newest_first;
}

void UpdateQueue::push(const UpdateBucket &bucket) { queue_.push_back(bucket); }

void UpdateQueue::backward_over() {
  newest_first_ = false;
  landed_ = 0;
  std::sort(queue_.begin(), queue_.end(), [](const UpdateBucket &a, const UpdateBucket &b) {
    return std::make_pair(a.block, a.begin) < std::make_pair(b.block, b.begin);
  });
}

UpdateBucket UpdateQueue::take(const std::function<bool(const UpdateBucket &)> &has_landed) {
  size_t at = 0;
  if (newest_first_) {
    while (landed_ < queue_.size() && has_landed(queue_[landed_])) ++landed_;
    if (landed_ > 0) at = --landed_;
  }
  const UpdateBucket bucket = queue_[at];
  queue_.erase(queue_.begin() + ptrdiff_t(at));
  return bucket;
}

}  // namespace zf
