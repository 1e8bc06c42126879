#include "optimizer_fixture.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

namespace zf::test {

PluginRegistry &registry() {
  static PluginRegistry instance{{PluginRegistry::builtin_dir()}};
  return instance;
}

Runtime &runtime() {
  static std::unique_ptr<Runtime> instance = Runtime::single_cpu();
  return *instance;
}

bool cpu_supports(const std::string &simd) {
#if defined(__x86_64__)
  if (simd == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  if (simd == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#endif
  return simd == "scalar";
}

std::vector<std::string> simd_paths() {
  std::vector<std::string> paths{"scalar"};
  for (const char *simd : {"avx2", "avx512"})
    if (cpu_supports(simd)) paths.push_back(simd);
  return paths;
}

LoadedOptimizer::LoadedOptimizer(const std::string &name,
                                 const std::map<std::string, Value> &params)
    : config_(*registry().find(ZF_KIND_OPTIMIZER, name).descriptor, "optimizer") {
  int line = 1;
  for (const auto &[key, value] : params)
    config_.set(key, value, Location{"test.toml", ++line, 1, ""});
  instance_ = std::make_unique<PluginInstance>(registry().find(ZF_KIND_OPTIMIZER, name), runtime(),
                                               config_);
}

void LoadedOptimizer::init_state(uint64_t numel) {
  zf_error error{};
  const zf_status status = api()->init_state(object(), numel, &error);
  INFO(error.message);
  REQUIRE(status == ZF_OK);
}

void LoadedOptimizer::step(const zf_optimizer_step_args &args) {
  zf_error error{};
  const zf_status status = api()->step(object(), &args, &error);
  INFO(error.message);
  REQUIRE(status == ZF_OK);
}

void LoadedOptimizer::submit_and_wait(const zf_optimizer_step_args &args) {
  zf_error error{};
  zf_status status = api()->submit(object(), &args, &error);
  INFO(error.message);
  REQUIRE(status == ZF_OK);
  status = api()->wait(object(), &error);
  REQUIRE(status == ZF_OK);
}

std::vector<float> LoadedOptimizer::state(uint32_t index, std::string *name,
                                          zf_dtype *dtype) const {
  const char *state_name = nullptr;
  zf_tensor_view view{};
  zf_error error{};
  REQUIRE(api()->state_tensor(object(), index, &state_name, &view, &error) == ZF_OK);
  if (name) *name = state_name;
  if (dtype) *dtype = view.dtype;
  std::vector<float> values(view.numel);
  for (uint64_t i = 0; i < view.numel; ++i) values[i] = load_float(view, i);
  return values;
}

namespace {
// Deterministic uniform in [-1, 1) from (seed, index).
double uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i * 0xd1b54a32d192ed03ull + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) / double(1ull << 52) - 1.0;
}
}  // namespace

Problem::Problem(uint64_t n, zf_dtype grads_as, zf_dtype out_as, uint64_t seed)
    : numel(n), grad_dtype(grads_as), out_dtype(out_as), params(n), grads(n) {
  for (uint64_t i = 0; i < n; ++i) params[i] = float(uniform(seed, i));
  if (grad_dtype != ZF_DTYPE_F32) grads16.resize(n);
  if (out_dtype != ZF_DTYPE_F32) out.assign(n + 1, 0);  // + 1: room for misaligned_out
  new_gradients(1);
}

void Problem::new_gradients(int64_t t, uint64_t seed) {
  for (uint64_t i = 0; i < numel; ++i) {
    // Magnitudes from 1e-4 to 1 across elements, a zero every 97th element.
    const double scale = std::pow(10.0, -4.0 * (0.5 + 0.5 * uniform(seed + 1000, i)));
    grads[i] = i % 97 == 5 ? 0.0f : float(scale * uniform(seed + uint64_t(t), i));
    if (grad_dtype == ZF_DTYPE_BF16) grads16[i] = float_to_bf16(grads[i]);
    if (grad_dtype == ZF_DTYPE_F16) grads16[i] = float_to_f16(grads[i]);
  }
}

std::vector<float> Problem::effective_gradients() const {
  return grad_dtype == ZF_DTYPE_F32 ? grads : widen(grads16, grad_dtype);
}

StepArgs::StepArgs(Problem &problem, std::vector<zf_optimizer_range> ranges_in,
                   std::vector<zf_optimizer_group> groups_in, int64_t step, float grad_scale)
    : ranges(std::move(ranges_in)), groups(std::move(groups_in)) {
  const uint64_t n = problem.numel;
  void *grads = problem.grad_dtype == ZF_DTYPE_F32 ? static_cast<void *>(problem.grads.data())
                                                   : static_cast<void *>(problem.grads16.data());
  args = optimizer_step_args(ranges.data(), ranges.size(), groups.data(), groups.size(), step, grad_scale,
                             {problem.params.data(), n, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                             {grads, n, problem.grad_dtype, ZF_DEVICE_CPU, 0, 0});
  if (problem.out_dtype != ZF_DTYPE_F32)
    args.params_out = {problem.out_data(), n, problem.out_dtype, ZF_DEVICE_CPU, 0, 0};
}

std::vector<zf_optimizer_range> awkward_ranges(uint64_t n) {
  // [0,1) g0 | gap | [3, 20) g1 | [20, n/2 + 5) g0 | gap of 2 | [n/2 + 7, n/2 + 8) g1 |
  // [n/2 + 9, n - 3) g0 | gap to the end
  return {{0, 1, 0, 0},
          {3, 20, 1, 0},
          {20, n / 2 + 5, 0, 0},
          {n / 2 + 7, n / 2 + 8, 1, 0},
          {n / 2 + 9, n - 3, 0, 0}};
}

std::vector<zf_optimizer_group> two_groups() {
  return {{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, {}}, {3e-3f, 0.8f, 0.99f, 1e-6f, 0.0f, {}}};
}

double worst_ratio(const std::vector<float> &a, const std::vector<float> &b, double atol,
                   double rtol, size_t *where) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ratio = std::fabs(double(a[i]) - double(b[i])) / (atol + rtol * std::fabs(b[i]));
    if (!(ratio <= worst)) {  // NaN counts as worst
      worst = std::isnan(ratio) ? INFINITY : ratio;
      if (where) *where = i;
    }
  }
  return worst;
}

std::vector<float> widen(const std::vector<uint16_t> &values, zf_dtype dtype) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = dtype == ZF_DTYPE_BF16 ? bf16_to_float(values[i]) : f16_to_float(values[i]);
  return out;
}

}  // namespace zf::test
