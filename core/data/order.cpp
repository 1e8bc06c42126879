#include "data/order.hpp"

#include <algorithm>
#include <cmath>

namespace zf {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  uint64_t state = mix64(seed, stream);
  for (int64_t i = n - 1; i > 0; --i) {
    state = mix64(state);
    // Multiply-shift maps 64 random bits onto [0, i]; the bias (< i / 2^64) is immaterial.
    int64_t j = int64_t((unsigned __int128)state * uint64_t(i + 1) >> 64);
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

SplitIndices split_indices(int64_t n, double eval_fraction) {
  SplitIndices split;
  int64_t held_out = int64_t(std::llround(double(n) * eval_fraction));
  if (eval_fraction > 0 && held_out == 0 && n > 1) held_out = 1;
  held_out = std::min(held_out, n);
  if (held_out == 0) {
    split.train.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) split.train[size_t(i)] = i;
    return split;
  }
  // A constant seed: the held-out set depends on the data alone, not on [run] seed.
  std::vector<int64_t> order = permutation(n, 0x5A46434F5245ull /* "ZFCORE" */, 0);
  split.eval.assign(order.begin(), order.begin() + held_out);
  split.train.assign(order.begin() + held_out, order.end());
  std::sort(split.eval.begin(), split.eval.end());
  std::sort(split.train.begin(), split.train.end());
  return split;
}

}  // namespace zf
