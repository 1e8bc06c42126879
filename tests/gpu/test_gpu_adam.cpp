// gpu_adam against adamw_ref, the numerical reference: same ranges, groups, gradients (fp32 and
// bf16) and steps, master weights and moments within fp32 rounding, bf16 params_out equal to the
// rounded master.
#include "gpu_skip.hpp"

#include "config/plugin_config.hpp"
#include "params/flat_buffers.hpp"
#include "plugin/plugin_instance.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <torch/torch.h>

using namespace zf;

namespace {

struct Optimizer {
  Optimizer(Runtime &runtime, PluginRegistry &registry, const std::string &name)
      : config(*registry.find(ZF_KIND_OPTIMIZER, name).descriptor, "optimizer"),
        instance(std::make_unique<PluginInstance>(registry.find(ZF_KIND_OPTIMIZER, name), runtime, config)) {}
  const zf_optimizer_api *api() const { return instance->api<zf_optimizer_api>(); }
  void call(zf_status status, const zf_error &error) const {
    INFO(error.message);
    REQUIRE(status == ZF_OK);
  }
  PluginConfig config;
  std::unique_ptr<PluginInstance> instance;
};

}  // namespace

TEST_CASE("gpu_adam matches adamw_ref over steps and groups with fp32 and bf16 gradients", "[gpu][optimizer]") {
  test::require_gpus(1);
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  auto cpu = Runtime::single_cpu();
  auto gpu = Runtime::single_cpu();
  use_cuda_device(*gpu);
  torch::Device device(torch::kCUDA, gpu->device_index);

  for (torch::Dtype grad_dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("grad dtype " << c10::toString(grad_dtype));
    Optimizer reference(*cpu, registry, "adamw_ref"), fused(*gpu, registry, "gpu_adam");
    // Three ranges over two groups, odd lengths and a gap (elements no range covers stay put);
    // long enough that the fused kernel uses several tiles per range.
    const uint64_t numel = 3 * 4096 * 3 + 777;
    std::vector<zf_optimizer_range> ranges = {{0, 5000, 0, 0}, {5000, 20000, 1, 0}, {20100, numel, 0, 0}};
    std::vector<zf_optimizer_group> groups = {{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, {}},
                                              {3e-3f, 0.8f, 0.99f, 1e-6f, 0.0f, {}}};
    zf_error error{};
    reference.call(reference.api()->init_state(reference.instance->object(), numel, &error), error);
    fused.call(fused.api()->init_state(fused.instance->object(), numel, &error), error);

    torch::manual_seed(7);
    torch::Tensor master_cpu = torch::randn({int64_t(numel)});
    torch::Tensor master_gpu = master_cpu.to(device);
    torch::Tensor out_cpu = torch::zeros({int64_t(numel)}, torch::kBFloat16);
    torch::Tensor out_gpu = torch::zeros({int64_t(numel)}, torch::TensorOptions().dtype(torch::kBFloat16).device(device));
    for (int64_t step = 1; step <= 5; ++step) {
      torch::Tensor grads_cpu = (torch::randn({int64_t(numel)}) * 3.0).to(grad_dtype);
      torch::Tensor grads_gpu = grads_cpu.to(device);
      zf_optimizer_step_args args = optimizer_step_args(ranges.data(), ranges.size(), groups.data(), groups.size(),
                                                        step, 0.5f, view_of(master_cpu), view_of(grads_cpu));
      args.params_out = view_of(out_cpu);
      reference.call(reference.api()->step(reference.instance->object(), &args, &error), error);
      args.params = view_of(master_gpu);
      args.grads = view_of(grads_gpu);
      args.params_out = view_of(out_gpu);
      args.stream = gpu->compute_stream;
      fused.call(fused.api()->step(fused.instance->object(), &args, &error), error);
    }
    synchronize_stream(gpu->compute_stream);
    torch::Tensor got = master_gpu.cpu();
    double worst = (got - master_cpu).abs().max().item<double>();
    INFO("worst master difference " << worst);
    CHECK(worst < 1e-5);
    // Elements in the gap between ranges are untouched by both.
    CHECK(torch::equal(got.narrow(0, 20000, 100), master_cpu.narrow(0, 20000, 100)));
    // The bf16 copy is the rounded master, written in the same pass.
    CHECK(torch::equal(out_gpu.cpu().narrow(0, 0, 20000), got.narrow(0, 0, 20000).to(torch::kBFloat16)));
    for (uint32_t index = 0; index < 2; ++index) {
      const char *name = nullptr;
      zf_tensor_view ref_view{}, gpu_view{};
      reference.call(reference.api()->state_tensor(reference.instance->object(), index, &name, &ref_view, &error), error);
      fused.call(fused.api()->state_tensor(fused.instance->object(), index, &name, &gpu_view, &error), error);
      CHECK(gpu_view.device == ZF_DEVICE_CUDA);
      torch::Tensor ref = torch::from_blob(ref_view.data, {int64_t(numel)});
      torch::Tensor mine = torch::from_blob(gpu_view.data, {int64_t(numel)}, torch::TensorOptions().device(device)).cpu();
      // Relative to the moment's scale: the kernel may fuse multiply-adds, so elements whose
      // moment is nearly zero differ by a few ulps of the larger terms that produced it.
      double moment_worst = ((mine - ref).abs().max() / ref.abs().max()).item<double>();
      INFO(name << " worst difference relative to the largest element " << moment_worst);
      CHECK(moment_worst < 1e-5);
    }
  }
}

TEST_CASE("gpu_adam declines in a CPU run and refuses host buffers", "[gpu][optimizer]") {
  test::require_gpus(1);
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  auto cpu = Runtime::single_cpu();
  const PluginFile &file = registry.find(ZF_KIND_OPTIMIZER, "gpu_adam");
  PluginConfig config(*file.descriptor, "optimizer");
  CHECK_THROWS_WITH(PluginInstance(file, *cpu, config), Catch::Contains("declined") && Catch::Contains("CPU"));

  auto gpu = Runtime::single_cpu();
  use_cuda_device(*gpu);
  Optimizer fused(*gpu, registry, "gpu_adam");
  zf_error error{};
  fused.call(fused.api()->init_state(fused.instance->object(), 16, &error), error);
  std::vector<float> params(16, 1.0f), grads(16, 1.0f);
  zf_optimizer_range range{0, 16, 0, 0};
  zf_optimizer_group group{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, {}};
  zf_optimizer_step_args args =
      optimizer_step_args(&range, 1, &group, 1, 1, 1.0f, zf_tensor_view{params.data(), 16, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                          zf_tensor_view{grads.data(), 16, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0});
  CHECK(fused.api()->step(fused.instance->object(), &args, &error) == ZF_ERROR_UNSUPPORTED);
  CHECK_THAT(std::string(error.message), Catch::Contains("on the GPU"));
}
