// cpu_lion and cpu_adagrad against their formulas computed in double, on every SIMD path, with
// two groups, awkward ranges, 16-bit gradients and params_out.
//
// Lion (Chen et al. 2023): c = b1 m + (1-b1) g; p = p (1 - lr wd) - lr sign(c); m = b2 m + (1-b2)
// g. Adagrad (torch.optim.Adagrad): g += wd p; sum += g^2; p -= lr / (1 + (t-1) lr_decay) * g /
// (sqrt(sum) + eps), sum starting at initial_accumulator_value.
// Tolerance: 1e-6 + 1e-5 |expected| over 20 steps (fp32 against double). Lion's sign() makes an
// element whose c is within rounding of 0 jump by 2 lr; the oracle skips the comparison of the
// few elements where |c| < 1e-6 at some step (their exact sign is rounding noise).
#include <catch2/catch.hpp>
#include <cmath>

#include "optimizer_fixture.hpp"

using namespace zf;
using namespace zf::test;

namespace {

constexpr int kSteps = 20;

// Which group updates element i at this step (-1: none).
std::vector<int> group_of(uint64_t n, const std::vector<zf_optimizer_range> &ranges) {
  std::vector<int> group(n, -1);
  for (const zf_optimizer_range &r : ranges)
    for (uint64_t i = r.begin; i < r.end; ++i) group[i] = int(r.group);
  return group;
}

}  // namespace

TEST_CASE("optimizer: cpu_lion follows the Lion update", "[optimizer]") {
  const uint64_t n = 3001;
  const auto ranges = awkward_ranges(n);
  const auto groups = two_groups();
  const auto group = group_of(n, ranges);
  const float grad_scale = 2.0f;
  for (const std::string &simd : simd_paths()) {
    for (zf_dtype grads_as : {ZF_DTYPE_F32, ZF_DTYPE_BF16}) {
      INFO("simd " << simd << ", grads dtype " << grads_as);
      LoadedOptimizer lion("cpu_lion", {{"simd", Value(simd)}});
      lion.init_state(n);
      Problem problem(n, grads_as, ZF_DTYPE_BF16);
      std::vector<double> p(problem.params.begin(), problem.params.end()), m(n, 0.0);
      std::vector<bool> ambiguous(n, false);
      for (int t = 1; t <= kSteps; ++t) {
        problem.new_gradients(t);
        const std::vector<float> g = problem.effective_gradients();
        lion.step(StepArgs(problem, ranges, groups, t, grad_scale).args);
        for (uint64_t i = 0; i < n; ++i) {
          if (group[i] < 0) continue;
          const zf_optimizer_group &h = groups[size_t(group[i])];
          const double gi = double(g[i]) * grad_scale;
          const double c = double(h.beta1) * m[i] + (1 - double(h.beta1)) * gi;
          if (std::fabs(c) < 1e-6) ambiguous[i] = true;
          p[i] = p[i] * (1 - double(h.lr) * double(h.weight_decay)) -
                 double(h.lr) * double((c > 0) - (c < 0));
          m[i] = double(h.beta2) * m[i] + (1 - double(h.beta2)) * gi;
        }
      }
      const std::vector<float> state = lion.state(0);
      uint64_t compared = 0;
      for (uint64_t i = 0; i < n; ++i) {
        if (ambiguous[i]) continue;
        ++compared;
        INFO("element " << i);
        REQUIRE(std::fabs(problem.params[i] - p[i]) <= 1e-6 + 1e-5 * std::fabs(p[i]));
        REQUIRE(std::fabs(state[i] - m[i]) <= 1e-6 + 1e-5 * std::fabs(m[i]));
        if (group[i] >= 0)
          REQUIRE(std::fabs(bf16_to_float(problem.out_data()[i]) - p[i]) <= std::fabs(p[i]) / 128);
      }
      CHECK(compared > n * 9 / 10);
    }
  }
}

TEST_CASE("optimizer: cpu_adagrad follows torch.optim.Adagrad", "[optimizer]") {
  const uint64_t n = 3001;
  const auto ranges = awkward_ranges(n);
  const auto groups = two_groups();
  const auto group = group_of(n, ranges);
  const double initial = 0.1, lr_decay = 0.01;
  for (const std::string &simd : simd_paths()) {
    for (zf_dtype grads_as : {ZF_DTYPE_F32, ZF_DTYPE_F16}) {
      INFO("simd " << simd << ", grads dtype " << grads_as);
      LoadedOptimizer adagrad("cpu_adagrad", {{"simd", Value(simd)},
                                              {"initial_accumulator_value", Value(initial)},
                                              {"lr_decay", Value(lr_decay)}});
      adagrad.init_state(n);
      Problem problem(n, grads_as, ZF_DTYPE_F32);
      std::vector<double> p(problem.params.begin(), problem.params.end());
      std::vector<double> sum(n, double(float(initial)));
      for (int t = 1; t <= kSteps; ++t) {
        problem.new_gradients(t);
        const std::vector<float> g = problem.effective_gradients();
        adagrad.step(StepArgs(problem, ranges, groups, t).args);
        for (uint64_t i = 0; i < n; ++i) {
          if (group[i] < 0) continue;
          const zf_optimizer_group &h = groups[size_t(group[i])];
          const double gi = double(g[i]) + double(h.weight_decay) * p[i];
          sum[i] += gi * gi;
          const double clr = double(h.lr) / (1 + (t - 1) * lr_decay);
          p[i] -= clr * gi / (std::sqrt(sum[i]) + double(h.eps));
        }
      }
      std::vector<float> expected_p(p.begin(), p.end()), expected_sum(sum.begin(), sum.end());
      CHECK(worst_ratio(problem.params, expected_p, 1e-6, 1e-5) <= 1.0);
      CHECK(worst_ratio(adagrad.state(0), expected_sum, 1e-6, 1e-5) <= 1.0);
    }
  }
}
