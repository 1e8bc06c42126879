// adamw_ref against AdamW computed by hand (in double, from the formula of Loshchilov & Hutter
// as torch.optim.AdamW implements it), for AdamW and Adam-with-L2, decay groups, gradient
// scaling, bf16 gradients and the bf16 parameter copy.
#include "plugin/plugin_instance.hpp"
#include "support/process.hpp"

#include <zf/zf_plugin.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using namespace zf;

namespace {

struct Expected {
  double p, m = 0, v = 0;
  // One AdamW (decoupled) or Adam (L2) step in double.
  void step(double g, double lr, double b1, double b2, double eps, double wd, bool decoupled, int t) {
    if (decoupled) p *= 1 - lr * wd;
    else g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    double m_hat = m / (1 - std::pow(b1, t)), v_hat = v / (1 - std::pow(b2, t));
    p -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
};

struct Reference {
  std::unique_ptr<Runtime> runtime = Runtime::single_cpu();
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  const PluginFile &file = registry.find(ZF_KIND_OPTIMIZER, "adamw_ref");
  PluginConfig config;
  std::unique_ptr<PluginInstance> instance;
  explicit Reference(bool decoupled) : config(*file.descriptor, "optimizer") {
    config.set("adam_w_mode", Value(decoupled), Location{"test", 1, 1, ""});
    instance = std::make_unique<PluginInstance>(file, *runtime, config);
  }
  const zf_optimizer_api *api() const { return instance->api<zf_optimizer_api>(); }
};

}  // namespace

TEST_CASE("adamw_ref: the first AdamW step by hand", "[optimizer]") {
  Reference ref(true);
  zf_error error{};
  REQUIRE(ref.api()->init_state(ref.instance->object(), 1, &error) == ZF_OK);
  float p = 1.0f, g = 0.5f;
  zf_optimizer_group group{0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, {}};
  zf_optimizer_range range{0, 1, 0, 0};
  zf_optimizer_step_args args = optimizer_step_args(&range, 1, &group, 1, 1, 1.0f, {&p, 1, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                                                    {&g, 1, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0});
  REQUIRE(ref.api()->step(ref.instance->object(), &args, &error) == ZF_OK);
  // p * (1 - lr wd) = 0.999; m_hat = 0.5, v_hat = 0.25, update = lr * 0.5 / 0.5 = 0.1.
  CHECK(p == Approx(0.899).epsilon(1e-6));
}

TEST_CASE("adamw_ref follows AdamW and Adam over many steps, groups, scales and dtypes", "[optimizer]") {
  for (bool decoupled : {true, false}) {
    for (zf_dtype grad_dtype : {ZF_DTYPE_F32, ZF_DTYPE_BF16}) {
      INFO("decoupled " << decoupled << " grad dtype " << grad_dtype);
      Reference ref(decoupled);
      const uint64_t n = 37;
      zf_error error{};
      REQUIRE(ref.api()->init_state(ref.instance->object(), n, &error) == ZF_OK);
      std::vector<float> params(n), grads(n);
      std::vector<uint16_t> grads_bf16(n), params_bf16(n);
      std::vector<Expected> expected;
      for (uint64_t i = 0; i < n; ++i) {
        params[i] = float(std::sin(double(i) + 1));
        expected.push_back({double(params[i])});
      }
      // Elements [0, 20) decay, [20, 37) do not; element 36 is outside every range.
      zf_optimizer_group groups[2] = {{1e-2f, 0.9f, 0.95f, 1e-6f, 0.1f, {}}, {1e-2f, 0.9f, 0.95f, 1e-6f, 0.0f, {}}};
      zf_optimizer_range ranges[2] = {{0, 20, 0, 0}, {20, 36, 1, 0}};
      for (int t = 1; t <= 50; ++t) {
        for (uint64_t i = 0; i < n; ++i) {
          float g = float(std::cos(double(i * 7 + t * 3)));
          grads_bf16[i] = float_to_bf16(g);
          grads[i] = grad_dtype == ZF_DTYPE_BF16 ? bf16_to_float(grads_bf16[i]) : g;
        }
        zf_optimizer_step_args args = optimizer_step_args(
            ranges, 2, groups, 2, t, 0.5f, {params.data(), n, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
            grad_dtype == ZF_DTYPE_BF16 ? zf_tensor_view{grads_bf16.data(), n, ZF_DTYPE_BF16, ZF_DEVICE_CPU, 0, 0}
                                        : zf_tensor_view{grads.data(), n, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0});
        args.params_out = {params_bf16.data(), n, ZF_DTYPE_BF16, ZF_DEVICE_CPU, 0, 0};
        REQUIRE(ref.api()->step(ref.instance->object(), &args, &error) == ZF_OK);
        for (uint64_t i = 0; i < 36; ++i)
          expected[i].step(double(grads[i]) * 0.5, 1e-2, 0.9, 0.95, 1e-6, i < 20 ? 0.1 : 0.0, decoupled, t);
      }
      for (uint64_t i = 0; i < 36; ++i) {
        INFO("element " << i);
        CHECK(params[i] == Approx(expected[i].p).margin(1e-5));
        CHECK(params_bf16[i] == float_to_bf16(params[i]));
      }
      CHECK(params[36] == float(std::sin(37.0)));  // outside every range: untouched
    }
  }
}

TEST_CASE("adamw_ref rejects bad arguments with a message", "[optimizer]") {
  Reference ref(true);
  zf_error error{};
  REQUIRE(ref.api()->init_state(ref.instance->object(), 4, &error) == ZF_OK);
  float p[8] = {}, g[8] = {};
  zf_optimizer_group group{1e-3f, 0.9f, 0.999f, 1e-8f, 0, {}};
  zf_optimizer_range range{0, 8, 0, 0};
  zf_optimizer_step_args args = optimizer_step_args(&range, 1, &group, 1, 1, 0.0f, {p, 8, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                                                    {g, 8, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0});
  CHECK(ref.api()->step(ref.instance->object(), &args, &error) == ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(error.message), Catch::Contains("state of 4"));
}
