// Initial values are drawn in pieces on several threads: the same seed gives the same values
// whatever the number of threads, they have the asked-for distribution, and bf16 values are the
// fp32 draws rounded.
#include "model/init.hpp"
#include "runtime/parallel.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("random_normal gives the same values on one thread and on several", "[model][init]") {
  const std::vector<int64_t> sizes{3, (int64_t(1) << 20) + 5};  // four pieces, the last short
  set_bulk_cores({0});
  torch::manual_seed(7);
  torch::Tensor one = random_normal(sizes, 0.02, torch::kFloat32);
  torch::Tensor next = random_normal(sizes, 0.02, torch::kFloat32);  // the default generator moved on
  set_bulk_cores({});
  torch::manual_seed(7);
  torch::Tensor several = random_normal(sizes, 0.02, torch::kFloat32);
  CHECK(torch::equal(one, several));
  CHECK_FALSE(torch::equal(one, next));
  CHECK(one.mean().item<double>() == Approx(0.0).margin(2e-4));
  CHECK(one.std().item<double>() == Approx(0.02).epsilon(0.01));
  // Pieces are not copies of each other.
  torch::Tensor flat = one.view(-1);
  CHECK_FALSE(torch::equal(flat.narrow(0, 0, 1000), flat.narrow(0, int64_t(1) << 20, 1000)));

  torch::manual_seed(7);
  torch::Tensor bf16 = random_normal(sizes, 0.02, torch::kBFloat16);
  CHECK(bf16.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(bf16, one.to(torch::kBFloat16)));
}
