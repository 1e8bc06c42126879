// order.hpp: the deterministic randomness of the data pipeline. Everything is a pure function of
// its seeds (splitmix64 and Fisher-Yates written out here, not std:: distributions, whose results
// differ between standard libraries), so every machine computes the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace zf {

// splitmix64's output function: a well-mixed 64-bit hash of x.
uint64_t mix64(uint64_t x);
inline uint64_t mix64(uint64_t a, uint64_t b) { return mix64(mix64(a) ^ (b + 0x9E3779B97F4A7C15ull)); }

// A uniformly shuffled permutation of [0, n), determined by (seed, stream).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream);

// The held-out split of n items: round(n * eval_fraction) of them (at least one when the fraction
// is positive), drawn with a fixed seed; both lists ascending and disjoint.
struct SplitIndices {
  std::vector<int64_t> train, eval;
};
SplitIndices split_indices(int64_t n, double eval_fraction);

}  // namespace zf
