// Core binding: ranks of one host get disjoint shares of its physical cores; a GPU run leaves most
// of a share to the optimizer workers. Oracle: the partition itself (disjoint, covering, sizes).
#include "runtime/affinity.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

using namespace zf;

TEST_CASE("ranks of a host get disjoint core shares that cover the host", "[offload][binding]") {
  std::vector<int> cores(16);
  for (int i = 0; i < 16; ++i) cores[size_t(i)] = i;
  for (int ranks : {1, 2, 3, 4}) {
    std::set<int> seen;
    for (int rank = 0; rank < ranks; ++rank) {
      CoreBinding b = split_cores(cores, rank, ranks, /*gpu_run=*/true);
      REQUIRE_FALSE(b.trainer.empty());
      REQUIRE_FALSE(b.workers.empty());
      CHECK_FALSE(b.shared);
      for (int core : b.trainer) CHECK(seen.insert(core).second);
      for (int core : b.workers) CHECK(seen.insert(core).second);
      if (ranks == 1) {  // 16 cores: 2 for the training and update threads, 14 for the optimizer
        CHECK(b.trainer == std::vector<int>{0, 1});
        CHECK(b.workers.size() == 14);
      }
    }
    CHECK(seen.size() == 16);
  }
}

TEST_CASE("a CPU run shares its cores between training and workers, too few cores are shared", "[offload][binding]") {
  CoreBinding cpu = split_cores({0, 1, 2, 3}, 1, 2, /*gpu_run=*/false);
  CHECK(cpu.trainer == std::vector<int>{2, 3});
  CHECK(cpu.workers == std::vector<int>{2, 3});
  CoreBinding few = split_cores({0, 1}, 2, 3, /*gpu_run=*/true);
  CHECK(few.shared);
  CHECK(few.trainer == std::vector<int>{0});
  CHECK(few.workers == std::vector<int>{0});
  CHECK(core_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
}
