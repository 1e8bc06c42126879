// param_digest gathers the master a slice at a time and hashes its pieces in parallel: any slice
// size gives the hash of the segments' values in layout order (padding between segments
// excluded), computed here directly.
#include "engine/engine.hpp"
#include "report/run_stats.hpp"
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
  // The definition, a value at a time from the last: the segments' values numbered in layout order.
  std::vector<std::pair<const float *, uint64_t>> stream;  // (value, position)
  for (const zf_segment &s : segments)
    for (uint64_t i = 0; i < s.numel; ++i) stream.push_back({master.data_ptr<float>() + s.offset + i, stream.size()});
  uint64_t sum = 0;
  for (auto v = stream.rbegin(); v != stream.rend(); ++v) sum += digest_floats(v->first, 1, v->second);
  const std::string expected = digest_string(sum, 22);

  auto runtime = Runtime::single_cpu();
  for (uint64_t slice : {1, 3, 7, 16, 40, 1000})
    CHECK(param_digest(*runtime->comm, layout, master, 0, 40, 40, slice) == expected);
  master[12] = 99.0f;  // padding after "a": not part of the digest
  CHECK(param_digest(*runtime->comm, layout, master, 0, 40, 40, 7) == expected);
  torch::Tensor swapped = master.clone();  // two values of "a" trade places: another model
  swapped[1] = master[2];
  swapped[2] = master[1];
  CHECK(param_digest(*runtime->comm, layout, swapped, 0, 40, 40, 7) != expected);
  master[17] = 99.0f;  // inside "b"
  CHECK(param_digest(*runtime->comm, layout, master, 0, 40, 40, 7) != expected);
}

TEST_CASE("param_digest of a large master hashed on several threads equals the serial definition", "[digest]") {
  const uint64_t n = (uint64_t(5) << 20) + 3;  // six pieces, the last short
  const zf_segment segment{"w", 0, n, n, 1, 0, 0};
  const zf_block block{"all", 0, n, 0, 1};
  zf_layout layout{sizeof(zf_layout), 1, &segment, 1, 0, &block, n, 8};
  torch::Tensor master = torch::randn({int64_t(n)});
  const std::string serial = digest_string(digest_floats(master.data_ptr<float>(), n, 0), n);
  auto runtime = Runtime::single_cpu();
  for (uint64_t slice : {n, uint64_t(3) << 20, uint64_t(1) << 24})
    CHECK(param_digest(*runtime->comm, layout, master, 0, n, n, slice) == serial);
}
