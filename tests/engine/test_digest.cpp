// param_digest gathers the master a slice at a time: any slice size gives the hash of the
// segments' bytes in layout order (padding between segments excluded), computed here directly.
#include "engine/engine.hpp"
#include "engine/run_stats.hpp"
#include "runtime/error.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <torch/torch.h>

using namespace zf;

TEST_CASE("param_digest is the same for every slice size and skips the padding", "[digest]") {
  // Three segments with padding after the first two; the flat buffer has 40 elements.
  const zf_segment segments[] = {{"a", 0, 10, 10, 1, 0, 0}, {"b", 16, 7, 7, 1, 0, 0}, {"c", 32, 5, 5, 1, 0, 0}};
  const zf_block block{"all", 0, 40, 0, 3};
  zf_layout layout{sizeof(zf_layout), 3, segments, 1, 0, &block, 40, 8};
  torch::Tensor master = torch::arange(40, torch::kFloat32) * 0.5f;
  uint64_t state = kDigestSeed;
  for (const zf_segment &s : segments)
    state = digest_bytes(master.data_ptr<float>() + s.offset, s.numel * sizeof(float), state);
  const std::string expected = format("%016llx", (unsigned long long)state);

  auto runtime = Runtime::single_cpu();
  for (uint64_t slice : {1, 3, 7, 16, 40, 1000})
    CHECK(param_digest(*runtime->comm, layout, master, 0, 40, 40, slice) == expected);
  master[12] = 99.0f;  // padding after "a": not part of the digest
  CHECK(param_digest(*runtime->comm, layout, master, 0, 40, 40, 7) == expected);
  master[17] = 99.0f;  // inside "b"
  CHECK(param_digest(*runtime->comm, layout, master, 0, 40, 40, 7) != expected);
}
