// optimizer_fixture.hpp: what the CPU optimizer tests share: an optimizer plugin loaded through
// the core's registry with a validated config (the real host, no mocks), a problem (params,
// gradients in any dtype, an optional params_out copy) with a deterministic random gradient per
// step, step arguments for any ranges and groups, and tolerance checks that report the worst
// element.
#pragma once

#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>
#include <zf/zf_plugin.hpp>

#include "config/plugin_config.hpp"
#include "plugin/plugin_instance.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/runtime.hpp"

namespace zf::test {

// One plugin object. params: the plugin's own config keys (validated like a TOML table).
class LoadedOptimizer {
 public:
  LoadedOptimizer(const std::string &name, const std::map<std::string, Value> &params = {});
  const zf_optimizer_api *api() const { return instance_->api<zf_optimizer_api>(); }
  zf_object *object() const { return instance_->object(); }
  void init_state(uint64_t numel);
  // Calls step (or submit + wait) and requires ZF_OK.
  void step(const zf_optimizer_step_args &args);
  void submit_and_wait(const zf_optimizer_step_args &args);
  // State tensor index as floats (bf16 state widened), with its name and dtype.
  std::vector<float> state(uint32_t index, std::string *name = nullptr,
                           zf_dtype *dtype = nullptr) const;

 private:
  PluginConfig config_;
  std::unique_ptr<PluginInstance> instance_;
};

// The registry and runtime every test shares (plugins load once per process anyway).
PluginRegistry &registry();
Runtime &runtime();
// Whether the CPU supports a forced simd path (what the plugin decides, asked the same way).
bool cpu_supports(const std::string &simd);
// simd paths to cover on this machine: scalar always, avx2/avx512 where present.
std::vector<std::string> simd_paths();

// 64-byte aligned storage, as host buffers from mem_alloc are (lets the kernels stream params_out).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U> &) {}
  T *allocate(size_t n) {
    return static_cast<T *>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T *p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Aligned64<U> &) const {
    return true;
  }
  template <class U>
  bool operator!=(const Aligned64<U> &) const {
    return false;
  }
};
using OutBuffer = std::vector<uint16_t, Aligned64<uint16_t>>;

struct Problem {
  uint64_t numel = 0;
  zf_dtype grad_dtype = ZF_DTYPE_F32;
  zf_dtype out_dtype = ZF_DTYPE_F32;  // F32: no params_out
  std::vector<float> params;
  std::vector<float> grads;       // F32 gradients (also the source of the 16-bit ones)
  std::vector<uint16_t> grads16;  // BF16/F16 gradients
  OutBuffer out;                  // params_out; 64-byte aligned unless misaligned_out
  bool misaligned_out = false;    // view params_out one element into a larger buffer instead

  Problem(uint64_t n, zf_dtype grads_as, zf_dtype out_as, uint64_t seed = 1);
  uint16_t *out_data() { return out.data() + (misaligned_out ? 1 : 0); }
  // params_out as the optimizer wrote it.
  std::vector<uint16_t> written_out() const {
    return std::vector<uint16_t>(out.begin() + (misaligned_out ? 1 : 0), out.end());
  }
  // New gradients for step t: mixed magnitudes, some exact zeros (v stays 0 there).
  void new_gradients(int64_t t, uint64_t seed = 7);
  // The gradients the optimizer actually sees, as floats (16-bit ones widened).
  std::vector<float> effective_gradients() const;
};

struct StepArgs {
  std::vector<zf_optimizer_range> ranges;
  std::vector<zf_optimizer_group> groups;
  zf_optimizer_step_args args{};
  // Views of problem; ranges and groups are copied.
  StepArgs(Problem &problem, std::vector<zf_optimizer_range> ranges,
           std::vector<zf_optimizer_group> groups, int64_t step, float grad_scale = 1.0f);
};

// Ranges that exercise the awkward cases inside [0, n): a 1-element range at 0, unaligned
// begins and ends, ranges shorter than a vector, gaps left untouched, two groups.
std::vector<zf_optimizer_range> awkward_ranges(uint64_t n);
// Two groups: a decayed one and a no-decay one with other betas, eps and lr.
std::vector<zf_optimizer_group> two_groups();

// Largest |a - b| / (atol + rtol |b|) over the elements; <= 1 passes. where: the worst index.
double worst_ratio(const std::vector<float> &a, const std::vector<float> &b, double atol,
                   double rtol, size_t *where = nullptr);
std::vector<float> widen(const std::vector<uint16_t> &values, zf_dtype dtype);
inline std::vector<float> widen(const OutBuffer &values, zf_dtype dtype) {
  return widen(std::vector<uint16_t>(values.begin(), values.end()), dtype);
}

}  // namespace zf::test
