// bench_optimizer.cpp: `zfcore bench optimizer`: optimizer plugins, torch's fused CPU AdamW and
// torch::optim::AdamW on the same buffers, side by side, with the memory ceilings of this machine
// measured in the same run. Implementations and the memory probes take turns step by step (round
// robin), so a noisy neighbour or a frequency change hits them all alike; each figure is a median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <zf/zf_plugin.hpp>

#include "bench/bench.hpp"
#include "bench/memory_bandwidth.hpp"
#include "bench/torch_peers.hpp"
#include "config/plugin_config.hpp"
#include "plugin/plugin_kinds.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/json.hpp"
#include "runtime/runtime.hpp"

namespace zf {
namespace {

const char *kUsage =
    "usage: zfcore bench optimizer [options]\n"
    "  --numel N            elements of the flat buffer (default 67108864; suffixes K, M, G)\n"
    "  --threads N          worker threads of every implementation (default: all allowed cores)\n"
    "  --grad-dtype D       f32 | bf16 | f16 (default f32)\n"
    "  --params-out D       none | bf16 | f16: low-precision copy written in the step\n"
    "  --moment-dtype D     f32 | bf16, for plugins that declare moment_dtype (default f32)\n"
    "  --simd S             auto | avx512 | avx2 | scalar, for plugins that declare simd\n"
    "  --plugins A,B        optimizer plugins to run (default cpu_adam,adamw_ref)\n"
    "  --no-torch           skip the libtorch peers\n"
    "  --steps N            timed steps per implementation (default 10, after 2 warm-up steps)\n"
    "  --json FILE          also write the results as JSON\n";

struct Options {
  uint64_t numel = 64ull << 20;
  unsigned threads = 0;
  zf_dtype grad_dtype = ZF_DTYPE_F32;
  zf_dtype out_dtype = ZF_DTYPE_F32;  // F32 here means "no params_out"
  std::string moment_dtype = "f32";
  std::string simd;
  std::vector<std::string> plugins{"cpu_adam", "adamw_ref"};
  bool torch = true;
  int steps = 10;
  int warmup = 2;
  std::string json;
};

const char *dtype_text(zf_dtype dtype) {
  return dtype == ZF_DTYPE_BF16 ? "bf16" : dtype == ZF_DTYPE_F16 ? "f16" : "f32";
}

zf_dtype parse_dtype(const std::string &flag, const std::string &text, bool allow_none) {
  if (text == "f32" && !allow_none) return ZF_DTYPE_F32;
  if (text == "none" && allow_none) return ZF_DTYPE_F32;
  if (text == "bf16") return ZF_DTYPE_BF16;
  if (text == "f16") return ZF_DTYPE_F16;
  throw Error(format("%s %s: expected %s", flag.c_str(), text.c_str(),
                     allow_none ? "none, bf16 or f16" : "f32, bf16 or f16"));
}

uint64_t parse_count(const std::string &flag, const std::string &text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    throw Error(format("%s %s: expected a number", flag.c_str(), text.c_str()));
  }
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k")
    value *= 1 << 10;
  else if (suffix == "M" || suffix == "m")
    value *= 1 << 20;
  else if (suffix == "G" || suffix == "g")
    value *= 1 << 30;
  else if (!suffix.empty())
    throw Error(format("%s %s: unknown suffix", flag.c_str(), text.c_str()));
  if (value < 1) throw Error(format("%s %s: must be >= 1", flag.c_str(), text.c_str()));
  return uint64_t(value);
}

Options parse_options(const std::vector<std::string> &args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--no-torch") {
      o.torch = false;
      continue;
    }
    if (i + 1 >= args.size()) throw Error(format("%s needs a value\n%s", flag.c_str(), kUsage));
    const std::string &value = args[++i];
    if (flag == "--numel")
      o.numel = parse_count(flag, value);
    else if (flag == "--threads")
      o.threads = unsigned(parse_count(flag, value));
    else if (flag == "--grad-dtype")
      o.grad_dtype = parse_dtype(flag, value, false);
    else if (flag == "--params-out")
      o.out_dtype = parse_dtype(flag, value, true);
    else if (flag == "--moment-dtype")
      o.moment_dtype = value;
    else if (flag == "--simd")
      o.simd = value;
    else if (flag == "--steps")
      o.steps = int(parse_count(flag, value));
    else if (flag == "--json")
      o.json = value;
    else if (flag == "--plugins") {
      o.plugins.clear();
      std::stringstream list(value);
      for (std::string name; std::getline(list, name, ',');)
        if (!name.empty()) o.plugins.push_back(name);
    } else {
      throw Error(format("unknown option %s\n%s", flag.c_str(), kUsage));
    }
  }
  return o;
}

// Uniform in [-1, 1) from a counter, so that buffers are filled the same way every run.
float uniform(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(int64_t(z >> 40) - (1ll << 23)) / float(1 << 23);
}

uint16_t to_16bit(float value, zf_dtype dtype) {
  return dtype == ZF_DTYPE_BF16 ? float_to_bf16(value) : float_to_f16(value);
}

struct Contender {
  std::string name;
  double bytes_per_element = 0;
  std::function<void(int64_t)> step;
  std::vector<double> seconds;
  double median() const;
};

// One optimizer plugin, loaded through the registry with its declared parameters set.
struct PluginContender {
  std::unique_ptr<OptimizerPlugin> plugin;
  zf_optimizer_step_args args{};
  zf_optimizer_range range{};
  zf_optimizer_group group{};
  bool low_moments = false;
};

std::unique_ptr<PluginContender> load_plugin(PluginRegistry &registry, Runtime &runtime,
                                             const std::string &name, const Options &o,
                                             unsigned threads) {
  const PluginFile &file = registry.find(ZF_KIND_OPTIMIZER, name);
  auto contender = std::make_unique<PluginContender>();
  LivePlugin live;
  live.config = std::make_unique<PluginConfig>(*file.descriptor, "optimizer");
  for (const zf_param_decl &decl : live.config->declarations()) {
    const std::string key = decl.key;
    const Location where{"--set", 0, 0, "optimizer." + key};
    if (key == "threads") live.config->set(key, Value(int64_t(threads)), where);
    if (key == "simd" && !o.simd.empty()) live.config->set(key, Value(o.simd), where);
    if (key == "moment_dtype") {
      live.config->set(key, Value(o.moment_dtype), where);
      contender->low_moments = o.moment_dtype == "bf16";
    }
  }
  live.instance = std::make_unique<PluginInstance>(file, runtime, *live.config);
  contender->plugin = std::make_unique<OptimizerPlugin>(std::move(live));
  return contender;
}

double bytes_per_element(const Options &o, bool low_moments) {
  const double moment = low_moments ? 2 : 4;
  const double grad = o.grad_dtype == ZF_DTYPE_F32 ? 4 : 2;
  const double out = o.out_dtype == ZF_DTYPE_F32 ? 0 : 2;
  return 8 + grad + 4 * moment + out;  // p read+write, g, m and v read+write, params_out
}

struct MemoryCeilings {
  double triad_gbs = 0;
  double adam_shaped_gelems = 0;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void print_table(const Options &o, unsigned threads, const MemoryCeilings &ceilings,
                 const std::vector<Contender> &contenders, double torch_fused_median) {
  std::printf(
      "\nzfcore bench optimizer: %llu elements, %u threads, grads %s, params_out %s, "
      "moments %s (plugins that declare moment_dtype)\n",
      (unsigned long long)o.numel, threads, dtype_text(o.grad_dtype),
      o.out_dtype == ZF_DTYPE_F32 ? "none" : dtype_text(o.out_dtype), o.moment_dtype.c_str());
  std::printf(
      "memory (same rounds, same threads): STREAM-like triad %.1f GB/s; Adam-shaped loop (read "
      "p,g,m,v, write p,m,v) "
      "%.3f Gelem/s = %.1f GB/s\n",
      ceilings.triad_gbs, ceilings.adam_shaped_gelems, ceilings.adam_shaped_gelems * 28);
  std::printf("%-42s %9s %9s %8s %8s %9s %11s\n", "implementation", "ms/step", "Gelem/s", "GB/s",
              "/triad", "/adam-ceil", "vs fused");
  for (const Contender &c : contenders) {
    const double seconds = c.median();
    const double gelems = double(o.numel) / seconds / 1e9;
    const double gbs = gelems * c.bytes_per_element;
    std::printf("%-42s %9.2f %9.3f %8.1f %8.2f %9.2f", c.name.c_str(), seconds * 1e3, gelems, gbs,
                gbs / ceilings.triad_gbs, gelems / ceilings.adam_shaped_gelems);
    if (torch_fused_median > 0) std::printf(" %10.2fx", torch_fused_median / seconds);
    std::printf("\n");
  }
  std::printf(
      "GB/s counts the bytes a fused step must move (%.0f B/element for fp32 moments); "
      "torch peers with 16-bit grads or params_out include their cast passes in the time.\n",
      bytes_per_element(o, false));
}

void write_json(const Options &o, unsigned threads, const MemoryCeilings &ceilings,
                const std::vector<Contender> &contenders, double torch_fused_median) {
  JsonWriter json;
  json.begin_object();
  json.key("benchmark").value("optimizer");
  json.key("numel").value(o.numel);
  json.key("threads").value(int64_t(threads));
  json.key("grad_dtype").value(dtype_text(o.grad_dtype));
  json.key("params_out").value(o.out_dtype == ZF_DTYPE_F32 ? "none" : dtype_text(o.out_dtype));
  json.key("moment_dtype").value(o.moment_dtype);
  json.key("steps").value(int64_t(o.steps));
  json.key("triad_gbs").value(ceilings.triad_gbs);
  json.key("adam_shaped_gelems").value(ceilings.adam_shaped_gelems);
  json.key("results").begin_array();
  for (const Contender &c : contenders) {
    const double seconds = c.median();
    const double gelems = double(o.numel) / seconds / 1e9;
    json.begin_object();
    json.key("name").value(c.name);
    json.key("median_ms").value(seconds * 1e3);
    json.key("gelems").value(gelems);
    json.key("gbs").value(gelems * c.bytes_per_element);
    json.key("bytes_per_element").value(c.bytes_per_element);
    json.key("fraction_of_triad").value(gelems * c.bytes_per_element / ceilings.triad_gbs);
    json.key("fraction_of_adam_ceiling").value(gelems / ceilings.adam_shaped_gelems);
    if (torch_fused_median > 0) json.key("vs_torch_fused").value(torch_fused_median / seconds);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  write_file_atomically(o.json, json.str() + "\n");
  std::printf("wrote %s\n", o.json.c_str());
}

double Contender::median() const { return zf::median(seconds); }

}  // namespace

int bench_optimizer(const std::vector<std::string> &args) {
  const Options o = parse_options(args);
  auto runtime = Runtime::single_cpu();
  if (o.threads && o.threads < runtime->worker_cores.size())
    runtime->worker_cores.resize(o.threads);
  const unsigned threads = o.threads ? o.threads : unsigned(runtime->worker_cores.size());
  const uint64_t n = o.numel;

  // The shared buffers: every implementation updates the same params from the same grads.
  MemoryLedger &ledger = runtime->memory;
  const size_t grad_size = o.grad_dtype == ZF_DTYPE_F32 ? 4 : 2;
  auto *params = static_cast<float *>(ledger.allocate(ZF_TIER_HOST, n * 4, "bench.params"));
  void *grads = ledger.allocate(ZF_TIER_HOST, n * grad_size, "bench.grads");
  void *params_out = o.out_dtype == ZF_DTYPE_F32
                         ? nullptr
                         : ledger.allocate(ZF_TIER_PINNED_HOST, n * 2, "bench.params_out");
  for (uint64_t i = 0; i < n; ++i) {
    params[i] = uniform(i);
    const float g = 1e-2f * uniform(i + n);
    if (grad_size == 4)
      static_cast<float *>(grads)[i] = g;
    else
      static_cast<uint16_t *>(grads)[i] = to_16bit(g, o.grad_dtype);
    if (params_out) static_cast<uint16_t *>(params_out)[i] = 0;
  }
  const double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;

  bench::MemoryProbe probe(n, runtime->worker_cores, threads);
  std::vector<double> triad_seconds, adam_shaped_seconds;

  std::vector<Contender> contenders;
  std::vector<std::unique_ptr<PluginContender>> plugins;
  PluginRegistry registry(PluginRegistry::default_search_path());
  for (const std::string &name : o.plugins) {
    std::unique_ptr<PluginContender> p;
    try {
      p = load_plugin(registry, *runtime, name, o, threads);
    } catch (const PluginDeclined &declined) {
      std::printf("skipping %s: %s\n", name.c_str(), declined.what());
      continue;
    }
    p->plugin->init_state(n);
    p->range = zf_optimizer_range{0, n, 0, 0};
    p->group = zf_optimizer_group{float(lr),  float(beta1),        float(beta2),
                                  float(eps), float(weight_decay), {}};
    zf_optimizer_step_args &a = p->args;
    a = optimizer_step_args(&p->range, 1, &p->group, 1, 0, 1.0f, zf_tensor_view{params, n, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                            zf_tensor_view{grads, n, o.grad_dtype, ZF_DEVICE_CPU, 0, 0});
    if (params_out) a.params_out = zf_tensor_view{params_out, n, o.out_dtype, ZF_DEVICE_CPU, 0, 0};
    PluginContender *raw = p.get();
    contenders.push_back(Contender{
        name,
        bytes_per_element(o, p->low_moments),
        [raw](int64_t step) {
          raw->args.step = step;
          raw->plugin->step(raw->args);
        },
        {}});
    plugins.push_back(std::move(p));
  }

  std::vector<std::unique_ptr<bench::TorchPeer>> peers;
  size_t torch_fused_index = size_t(-1);
  if (o.torch) {
    bench::set_torch_threads(int(threads));
    bench::PeerBuffers b;
    b.params = params;
    b.grads = grads;
    b.grad_dtype = o.grad_dtype;
    b.params_out = params_out;
    b.out_dtype = o.out_dtype;
    b.numel = n;
    // Torch gets the float-rounded hyperparameters the plugins see, so all run the same math.
    b.lr = float(lr), b.beta1 = float(beta1), b.beta2 = float(beta2), b.eps = float(eps);
    b.weight_decay = float(weight_decay);
    peers.push_back(bench::make_torch_fused_adamw(b));
    peers.push_back(bench::make_torch_optim_adamw(b));
    torch_fused_index = contenders.size();
    for (auto &peer : peers) {
      bench::TorchPeer *raw = peer.get();
      contenders.push_back(Contender{
          raw->name(), bytes_per_element(o, false), [raw](int64_t step) { raw->step(step); }, {}});
    }
  }

  // Round robin: the memory probes and step s of every implementation, then step s + 1.
  for (int s = 1; s <= o.warmup + o.steps; ++s) {
    const double triad = probe.triad_seconds(), adam_shaped = probe.adam_shaped_seconds();
    if (s > o.warmup) {
      triad_seconds.push_back(triad);
      adam_shaped_seconds.push_back(adam_shaped);
    }
    for (Contender &c : contenders) {
      const auto start = std::chrono::steady_clock::now();
      c.step(s);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s > o.warmup) c.seconds.push_back(seconds);
    }
  }

  MemoryCeilings ceilings;
  ceilings.triad_gbs = 12.0 * double(probe.numel()) / median(triad_seconds) / 1e9;
  ceilings.adam_shaped_gelems = double(probe.numel()) / median(adam_shaped_seconds) / 1e9;
  const double fused_median =
      torch_fused_index < contenders.size() ? contenders[torch_fused_index].median() : 0.0;
  print_table(o, threads, ceilings, contenders, fused_median);
  if (!o.json.empty()) write_json(o, threads, ceilings, contenders, fused_median);

  plugins.clear();
  peers.clear();
  if (params_out) ledger.release(params_out);
  ledger.release(grads);
  ledger.release(params);
  return 0;
}

}  // namespace zf
