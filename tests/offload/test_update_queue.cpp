// The order of a step's CPU update (core/update/update_queue.hpp), on a simulated step: 8 blocks
// of 4 buckets, handed over at once by a training thread that runs ahead of the device, landing
// one per time unit from the deepest block up, updated in 2 units each. Oracle: the step's
// timeline, replayed here.
#include "update/update_queue.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

using namespace zf;

namespace {

constexpr uint32_t kBlocks = 8, kPerBlock = 4;
constexpr uint64_t kBuckets = kBlocks * kPerBlock, kUpdate = 2;

struct Taken {
  UpdateBucket bucket;
  uint64_t at;       // when the thread took it
  uint64_t started;  // when its update began (after its gradients landed)
};

// Bucket i lands at i + 1; the backward is over once the last has landed.
uint64_t lands(const UpdateBucket &b) { return b.sequence + 1; }

std::vector<Taken> replay(bool newest_first) {
  UpdateQueue queue;
  queue.start(newest_first);
  for (uint64_t i = 0; i < kBuckets; ++i) {
    const uint32_t block = kBlocks - 1 - uint32_t(i / kPerBlock);
    const uint64_t begin = (block * kPerBlock + i % kPerBlock) * 100;
    queue.push(UpdateBucket{begin, begin + 100, nullptr, i, block});
  }
  std::vector<Taken> taken;
  bool over = false;
  for (uint64_t t = 0; !queue.empty();) {
    if (!over && t >= kBuckets) {
      queue.backward_over();
      over = true;
    }
    const UpdateBucket b = queue.take([&](const UpdateBucket &q) { return lands(q) <= t; });
    const uint64_t started = std::max(t, lands(b));
    taken.push_back(Taken{b, t, started});
    t = started + kUpdate;
  }
  return taken;
}

}  // namespace

TEST_CASE("during the backward the update takes the newest landed bucket, then the rest in the forward's order, "
          "and ends with the deepest block",
          "[offload]") {
  const std::vector<Taken> taken = replay(/*newest_first=*/true);
  REQUIRE(taken.size() == kBuckets);
  std::set<uint64_t> seen;
  for (const Taken &x : taken) CHECK(seen.insert(x.bucket.sequence).second);
  size_t after = 0;  // the first taken after the backward
  while (after < taken.size() && taken[after].at < kBuckets) ++after;
  for (size_t i = 0; i < taken.size(); ++i) {
    const Taken &x = taken[i];
    INFO("taken " << i << ": bucket " << x.bucket.sequence << " at " << x.at);
    // Waits for gradients only when none queued had landed (every one taken later landed later).
    if (x.started > x.at)
      for (size_t j = i + 1; j < taken.size(); ++j) CHECK(lands(taken[j].bucket) > x.at);
    // During the backward: the newest landed (none queued landed later and is still queued).
    if (i < after && x.started == x.at)
      for (size_t j = i + 1; j < taken.size(); ++j)
        CHECK((lands(taken[j].bucket) > x.at || taken[j].bucket.sequence < x.bucket.sequence));
  }
  // The backward left buckets of every block; after it, the forward's order to the deepest block.
  std::set<uint32_t> left;
  for (size_t i = after; i < taken.size(); ++i) left.insert(taken[i].bucket.block);
  CHECK(left.size() == kBlocks);
  for (size_t i = after + 1; i < taken.size(); ++i) CHECK(taken[i - 1].bucket.begin < taken[i].bucket.begin);
  CHECK(taken.back().bucket.block == kBlocks - 1);
  // Nothing idles: the thread is busy from the first landing to the end.
  CHECK(taken.back().started + kUpdate == 1 + kBuckets * kUpdate);
}

TEST_CASE("disk tiles are updated in the order handed over during the backward", "[offload]") {
  const std::vector<Taken> taken = replay(/*newest_first=*/false);
  REQUIRE(taken.size() == kBuckets);
  size_t i = 0;
  for (; i < taken.size() && taken[i].at < kBuckets; ++i) CHECK(taken[i].bucket.sequence == i);
  CHECK(i > 0);
  for (++i; i < taken.size(); ++i) CHECK(taken[i - 1].bucket.begin < taken[i].bucket.begin);
}
