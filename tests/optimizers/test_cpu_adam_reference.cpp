// cpu_adam against adamw_ref (the scalar reference plugin), on every SIMD path this CPU has, for
// AdamW and Adam (L2), fp32/bf16/fp16 gradients, no/bf16/fp16 params_out, two groups, odd sizes,
// unaligned sub-ranges, 1-element ranges and gaps that must stay untouched; and the bf16-moment
// mode against the fp32 reference with the looser bound its rounding allows.
//
// Tolerances (params and moments, 30 steps): |cpu_adam - ref| <= 1e-6 + 1e-5 |ref|. The two
// compute the same formula in fp32 but round differently (FMA in the SIMD paths, lerp-form
// exp_avg in the reference), a few ulps per step; the bound is ~10x what is observed. The 16-bit
// params_out may differ by one 16-bit ulp where the fp32 params straddle a rounding boundary:
// rtol 2^-7 (bf16) / 2^-10 (fp16).
#include <catch2/catch.hpp>

#include "optimizer_fixture.hpp"

using namespace zf;
using namespace zf::test;

namespace {

constexpr int kSteps = 30;

void require_close(const std::vector<float> &actual, const std::vector<float> &expected,
                   double atol, double rtol, const char *what) {
  size_t where = 0;
  const double ratio = worst_ratio(actual, expected, atol, rtol, &where);
  INFO(what << ": worst element " << where << " got " << actual[where] << " expected "
            << expected[where] << " (" << ratio << " of the tolerance)");
  REQUIRE(ratio <= 1.0);
  if (getenv("ZF_TEST_VERBOSE")) WARN(what << " ratio " << ratio);
}

double out_rtol(zf_dtype dtype) { return dtype == ZF_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024; }

}  // namespace

TEST_CASE("optimizer: cpu_adam matches adamw_ref on every SIMD path, variant and precision",
          "[optimizer]") {
  const uint64_t n = 5003;  // odd: every chunk and vector boundary is crossed unaligned
  for (const std::string &simd : simd_paths()) {
    for (bool decoupled : {true, false}) {
      for (zf_dtype grads_as : {ZF_DTYPE_F32, ZF_DTYPE_BF16, ZF_DTYPE_F16}) {
        for (zf_dtype out_as : {ZF_DTYPE_F32, ZF_DTYPE_BF16, ZF_DTYPE_F16}) {
          INFO("simd " << simd << ", adam_w_mode " << decoupled << ", grads dtype " << grads_as
                       << ", params_out dtype " << out_as << " (F32 = none)");
          LoadedOptimizer fast("cpu_adam",
                               {{"simd", Value(simd)}, {"adam_w_mode", Value(decoupled)}});
          LoadedOptimizer ref("adamw_ref", {{"adam_w_mode", Value(decoupled)}});
          fast.init_state(n);
          ref.init_state(n);
          Problem a(n, grads_as, out_as), b(n, grads_as, out_as);
          // params_out aligned (streamed by the SIMD paths) and, with f16 grads, misaligned.
          a.misaligned_out = b.misaligned_out = grads_as == ZF_DTYPE_F16;
          const std::vector<float> initial = a.params;
          for (int t = 1; t <= kSteps; ++t) {
            a.new_gradients(t);
            b.new_gradients(t);
            fast.step(StepArgs(a, awkward_ranges(n), two_groups(), t, 0.5f).args);
            ref.step(StepArgs(b, awkward_ranges(n), two_groups(), t, 0.5f).args);
          }
          require_close(a.params, b.params, 1e-6, 1e-5, "params");
          require_close(fast.state(0), ref.state(0), 1e-6, 1e-5, "exp_avg");
          require_close(fast.state(1), ref.state(1), 1e-9, 1e-5, "exp_avg_sq");
          if (out_as != ZF_DTYPE_F32)
            require_close(widen(a.written_out(), out_as), widen(b.written_out(), out_as), 1e-6,
                          out_rtol(out_as), "params_out");
          // Gaps between ranges are never touched.
          for (uint64_t i :
               {uint64_t(1), uint64_t(2), n / 2 + 5, n / 2 + 6, n / 2 + 8, n - 3, n - 1}) {
            INFO("gap element " << i);
            REQUIRE(a.params[i] == initial[i]);
            if (out_as != ZF_DTYPE_F32) REQUIRE(a.out_data()[i] == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("optimizer: cpu_adam updates a 1-element buffer and sub-ranges of any alignment",
          "[optimizer]") {
  for (const std::string &simd : simd_paths()) {
    INFO("simd " << simd);
    // A whole buffer of one element.
    LoadedOptimizer one("cpu_adam", {{"simd", Value(simd)}});
    LoadedOptimizer one_ref("adamw_ref");
    one.init_state(1);
    one_ref.init_state(1);
    Problem a(1, ZF_DTYPE_F32, ZF_DTYPE_BF16), b(1, ZF_DTYPE_F32, ZF_DTYPE_BF16);
    for (int t = 1; t <= 5; ++t) {
      a.new_gradients(t);
      b.new_gradients(t);
      one.step(StepArgs(a, {{0, 1, 0, 0}}, two_groups(), t).args);
      one_ref.step(StepArgs(b, {{0, 1, 0, 0}}, two_groups(), t).args);
    }
    require_close(a.params, b.params, 1e-6, 1e-5, "1-element params");

    // Every begin offset 0..17 and length 0..33 within a 64-element buffer.
    const uint64_t n = 64;
    for (uint64_t begin = 0; begin < 18; ++begin) {
      for (uint64_t length = 0; length < 34; length += 3) {
        LoadedOptimizer fast("cpu_adam", {{"simd", Value(simd)}});
        LoadedOptimizer ref("adamw_ref");
        fast.init_state(n);
        ref.init_state(n);
        Problem x(n, ZF_DTYPE_BF16, ZF_DTYPE_F32), y(n, ZF_DTYPE_BF16, ZF_DTYPE_F32);
        fast.step(StepArgs(x, {{begin, begin + length, 0, 0}}, two_groups(), 1).args);
        ref.step(StepArgs(y, {{begin, begin + length, 0, 0}}, two_groups(), 1).args);
        INFO("range [" << begin << ", " << begin + length << ")");
        require_close(x.params, y.params, 1e-6, 1e-5, "params");
      }
    }
  }
}

// bf16 moments are an explicit memory-saving mode that changes the numerics: each step rounds m
// and v to 8 significant bits (relative error <= 2^-9 per rounding, and with beta2 = 0.999 the
// decay of v is below bf16's resolution, so v drifts by up to ~2^-9 per step). Over 30 steps the
// moments stay within 30 * 2^-9 < 1/16 relative (m, which cancels, within 2^-8 of the largest
// gradient, 1, absolute) and the params within lr * steps * 2^-4 < 2e-3 of the fp32 run.
TEST_CASE("optimizer: cpu_adam with bf16 moments stays within its documented bound",
          "[optimizer]") {
  const uint64_t n = 4099;
  for (const std::string &simd : simd_paths()) {
    INFO("simd " << simd);
    LoadedOptimizer fast("cpu_adam",
                         {{"simd", Value(simd)}, {"moment_dtype", Value(std::string("bf16"))}});
    LoadedOptimizer ref("adamw_ref");
    fast.init_state(n);
    ref.init_state(n);
    Problem a(n, ZF_DTYPE_BF16, ZF_DTYPE_BF16), b(n, ZF_DTYPE_BF16, ZF_DTYPE_BF16);
    const std::vector<zf_optimizer_group> groups{{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, {}}};
    for (int t = 1; t <= kSteps; ++t) {
      a.new_gradients(t);
      b.new_gradients(t);
      fast.step(StepArgs(a, {{0, n, 0, 0}}, groups, t).args);
      ref.step(StepArgs(b, {{0, n, 0, 0}}, groups, t).args);
    }
    std::string name;
    zf_dtype dtype = ZF_DTYPE_F32;
    const std::vector<float> m = fast.state(0, &name, &dtype);
    CHECK(name == "exp_avg");
    CHECK(dtype == ZF_DTYPE_BF16);
    require_close(a.params, b.params, 2e-3, 0, "params");
    require_close(m, ref.state(0), 4e-3, 1.0 / 16, "exp_avg");
    require_close(fast.state(1), ref.state(1), 1e-10, 1.0 / 16, "exp_avg_sq");
  }
}
