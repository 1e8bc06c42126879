// What users of the CPU optimizer plugins rely on beyond the math: results that do not depend on
// the thread count or on how a step is split into ranges (bit for bit), the AVX2 and AVX-512
// paths agreeing bit for bit, submit/wait that is safe to repeat and refuses a second step in
// flight, clear errors for bad hyperparameters and arguments, config errors with a location, a
// forced SIMD path the CPU lacks declining with a message, and honest state tensors.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>

#include "optimizer_fixture.hpp"
#include "runtime/error.hpp"

using namespace zf;
using namespace zf::test;

namespace {

struct Outcome {
  std::vector<float> params, m, v;
  std::vector<uint16_t> out;
};

// Steps steps of cpu_adam (or another CPU optimizer) over ranges with the given config.
Outcome run(const std::string &plugin, const std::map<std::string, Value> &params, uint64_t n,
            const std::vector<zf_optimizer_range> &ranges, int steps, bool async = false) {
  LoadedOptimizer optimizer(plugin, params);
  optimizer.init_state(n);
  Problem problem(n, ZF_DTYPE_BF16, ZF_DTYPE_F16);
  for (int t = 1; t <= steps; ++t) {
    problem.new_gradients(t);
    StepArgs step(problem, ranges, two_groups(), t, 0.75f);
    if (async)
      optimizer.submit_and_wait(step.args);
    else
      optimizer.step(step.args);
  }
  Outcome outcome{problem.params, optimizer.state(0), {}, problem.written_out()};
  if (plugin == "cpu_adam") outcome.v = optimizer.state(1);
  return outcome;
}

void require_identical(const Outcome &a, const Outcome &b) {
  REQUIRE(a.params.size() == b.params.size());
  CHECK(std::memcmp(a.params.data(), b.params.data(), a.params.size() * 4) == 0);
  CHECK(std::memcmp(a.m.data(), b.m.data(), a.m.size() * 4) == 0);
  CHECK(std::memcmp(a.v.data(), b.v.data(), a.v.size() * 4) == 0);
  CHECK(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2) == 0);
}

zf_status step_status(LoadedOptimizer &optimizer, const zf_optimizer_step_args &args,
                      std::string *message) {
  zf_error error{};
  const zf_status status = optimizer.api()->step(optimizer.object(), &args, &error);
  *message = error.message;
  return status;
}

}  // namespace

TEST_CASE("optimizer: threaded steps are bit-identical to single-threaded ones", "[optimizer]") {
  const uint64_t n = 100003;  // several 8192-element chunks, so the pool really splits the work
  for (const std::string &simd : simd_paths()) {
    for (const std::string &moments : {"f32", "bf16"}) {
      INFO("simd " << simd << ", moments " << moments);
      auto config = [&](int64_t threads) {
        return std::map<std::string, Value>{
            {"simd", Value(simd)}, {"moment_dtype", Value(moments)}, {"threads", Value(threads)}};
      };
      const Outcome one = run("cpu_adam", config(1), n, awkward_ranges(n), 4);
      require_identical(one, run("cpu_adam", config(2), n, awkward_ranges(n), 4));
      require_identical(one, run("cpu_adam", config(5), n, awkward_ranges(n), 4));
      require_identical(one, run("cpu_adam", config(0), n, awkward_ranges(n), 4, true));
    }
  }
}

TEST_CASE("optimizer: splitting a step into many small ranges changes no bit", "[optimizer]") {
  // Tail elements of a range go through the same instructions as the body: one range over
  // [0, n) equals the same elements cut into pieces of 1, 3, 17, 5, ... elements.
  const uint64_t n = 40000;
  std::vector<zf_optimizer_range> pieces;
  const uint64_t lengths[] = {1, 3, 17, 5, 16, 33, 2, 4096, 7, 9000};
  for (uint64_t begin = 0, k = 0; begin < n; ++k) {
    const uint64_t end = std::min(n, begin + lengths[k % 10]);
    pieces.push_back({begin, end, 0, 0});
    begin = end;
  }
  for (const std::string &simd : simd_paths()) {
    INFO("simd " << simd);
    const std::map<std::string, Value> config{{"simd", Value(simd)}};
    require_identical(run("cpu_adam", config, n, {{0, n, 0, 0}}, 3),
                      run("cpu_adam", config, n, pieces, 3));
  }
}

TEST_CASE("optimizer: the AVX2 and AVX-512 paths agree bit for bit", "[optimizer]") {
  if (!cpu_supports("avx2") || !cpu_supports("avx512")) {
    WARN("skipped: this CPU lacks AVX2 or AVX-512");
    return;
  }
  // Same operations in the same order with FMA on both: only the vector width differs.
  const uint64_t n = 30001;
  for (const char *plugin : {"cpu_adam", "cpu_lion", "cpu_adagrad"}) {
    INFO(plugin);
    require_identical(
        run(plugin, {{"simd", Value(std::string("avx2"))}}, n, awkward_ranges(n), 3),
        run(plugin, {{"simd", Value(std::string("avx512"))}}, n, awkward_ranges(n), 3));
  }
}

TEST_CASE("optimizer: submit and wait are safe to repeat and refuse a second step in flight",
          "[optimizer]") {
  const uint64_t n = 50000;
  // 40 asynchronous steps give what 40 synchronous ones give.
  require_identical(run("cpu_adam", {}, n, awkward_ranges(n), 40, true),
                    run("cpu_adam", {}, n, awkward_ranges(n), 40, false));

  Problem problem(n, ZF_DTYPE_F32, ZF_DTYPE_F32);  // outlives the optimizer (a step in flight)
  LoadedOptimizer optimizer("cpu_adam");
  optimizer.init_state(n);
  StepArgs step(problem, {{0, n, 0, 0}}, two_groups(), 1);
  zf_error error{};
  CHECK(optimizer.api()->wait(optimizer.object(), &error) == ZF_OK);  // nothing in flight
  REQUIRE(optimizer.api()->submit(optimizer.object(), &step.args, &error) == ZF_OK);
  CHECK(optimizer.api()->submit(optimizer.object(), &step.args, &error) ==
        ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(error.message, Catch::Contains("in flight"));
  CHECK(optimizer.api()->step(optimizer.object(), &step.args, &error) == ZF_ERROR_INVALID_ARGUMENT);
  CHECK(optimizer.api()->wait(optimizer.object(), &error) == ZF_OK);
  CHECK(optimizer.api()->wait(optimizer.object(), &error) == ZF_OK);
  // The plugin copied ranges and groups at submit: the caller may reuse its arrays at once.
  StepArgs second(problem, {{0, n, 0, 0}}, two_groups(), 2);
  REQUIRE(optimizer.api()->submit(optimizer.object(), &second.args, &error) == ZF_OK);
  second.ranges[0].end = 0;
  second.groups[0].lr = -1;
  CHECK(optimizer.api()->wait(optimizer.object(), &error) == ZF_OK);
  // Destroying an object with a step in flight waits for it (PluginInstance's destructor).
  StepArgs third(problem, {{0, n, 0, 0}}, two_groups(), 3);
  REQUIRE(optimizer.api()->submit(optimizer.object(), &third.args, &error) == ZF_OK);
}

TEST_CASE("optimizer: bad hyperparameters and arguments are errors that say what is wrong",
          "[optimizer]") {
  const uint64_t n = 100;
  struct Bad {
    zf_optimizer_group group;
    const char *says;
  };
  const Bad bad[] = {
      {{-1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, {}}, "lr must be"},
      {{1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f, {}}, "betas must be in [0, 1)"},
      {{1e-3f, 0.9f, -0.1f, 1e-8f, 0.0f, {}}, "betas must be in [0, 1)"},
      {{1e-3f, 0.9f, 0.999f, 0.0f, 0.0f, {}}, "eps must be > 0"},
      {{1e-3f, 0.9f, 0.999f, 1e-8f, -0.1f, {}}, "weight_decay must be"},
  };
  for (const Bad &b : bad) {
    INFO(b.says);
    LoadedOptimizer optimizer("cpu_adam");
    optimizer.init_state(n);
    Problem problem(n, ZF_DTYPE_F32, ZF_DTYPE_F32);
    std::string message;
    CHECK(step_status(optimizer, StepArgs(problem, {{0, n, 0, 0}}, {b.group}, 1).args, &message) ==
          ZF_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(message, Catch::Contains(b.says) && Catch::Contains("group 0"));
  }

  LoadedOptimizer optimizer("cpu_adam");
  Problem problem(n, ZF_DTYPE_F32, ZF_DTYPE_F32);
  std::string message;
  CHECK(step_status(optimizer, StepArgs(problem, {{0, n, 0, 0}}, two_groups(), 1).args, &message) ==
        ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Catch::Contains("before init_state"));
  optimizer.init_state(n);
  CHECK(step_status(optimizer, StepArgs(problem, {{0, n + 1, 0, 0}}, two_groups(), 1).args,
                    &message) == ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Catch::Contains("range 0"));
  CHECK(step_status(optimizer,
                    StepArgs(problem, {{10, 20, 0, 0}, {15, 30, 0, 0}}, two_groups(), 1).args,
                    &message) == ZF_ERROR_INVALID_ARGUMENT);
  CHECK(step_status(optimizer, StepArgs(problem, {{0, n, 2, 0}}, two_groups(), 1).args, &message) ==
        ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Catch::Contains("group 2"));
  CHECK(step_status(optimizer, StepArgs(problem, {{0, n, 0, 0}}, two_groups(), 0).args, &message) ==
        ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Catch::Contains("step must be >= 1"));
  StepArgs wrong_out(problem, {{0, n, 0, 0}}, two_groups(), 1);
  float not_16_bit[n];
  wrong_out.args.params_out = {not_16_bit, n, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0};
  CHECK(step_status(optimizer, wrong_out.args, &message) == ZF_ERROR_UNSUPPORTED);
  CHECK_THAT(message, Catch::Contains("params_out must be BF16 or F16"));
}

TEST_CASE("optimizer: plugin parameters out of range are config errors with a location",
          "[optimizer]") {
  const PluginFile &file = registry().find(ZF_KIND_OPTIMIZER, "cpu_adam");
  PluginConfig config(*file.descriptor, "optimizer");
  const Location where{"train.toml", 12, 11, ""};
  CHECK_THROWS_WITH(config.set("threads", Value(int64_t(-1)), where),
                    Catch::Contains("train.toml:12:11") && Catch::Contains("threads"));
  CHECK_THROWS_WITH(config.set("simd", Value(std::string("avx9")), where),
                    Catch::Contains("train.toml:12:11") && Catch::Contains("simd"));
  CHECK_THROWS_WITH(config.set("moment_dtype", Value(std::string("fp8")), where),
                    Catch::Contains("moment_dtype"));
  CHECK_THROWS_WITH(config.set("adam_w_mode", Value(std::string("yes")), where),
                    Catch::Contains("adam_w_mode"));
}

TEST_CASE("optimizer: a forced SIMD path the CPU lacks declines with a message", "[optimizer]") {
  // On CPUs that really lack a path, forcing it declines; elsewhere ZF_SIMD_MAX caps what the
  // plugin treats as present, which takes the same code path.
  for (const char *simd : {"avx2", "avx512"}) {
    if (!cpu_supports(simd)) {
      INFO(simd);
      CHECK_THROWS_AS(LoadedOptimizer("cpu_adam", {{"simd", Value(std::string(simd))}}),
                      PluginDeclined);
    }
  }
  setenv("ZF_SIMD_MAX", "scalar", 1);
  for (const char *simd : {"avx2", "avx512"}) {
    INFO(simd);
    CHECK_THROWS_WITH(LoadedOptimizer("cpu_adam", {{"simd", Value(std::string(simd))}}),
                      Catch::Contains("simd = \"" + std::string(simd) + "\"") &&
                          Catch::Contains("set simd = \"auto\""));
    CHECK_THROWS_AS(LoadedOptimizer("cpu_lion", {{"simd", Value(std::string(simd))}}),
                    PluginDeclined);
  }
  LoadedOptimizer fallback("cpu_adam",
                           {{"simd", Value(std::string("auto"))}});  // auto never declines
  unsetenv("ZF_SIMD_MAX");
}

TEST_CASE("optimizer: state tensors name and expose the optimizer state", "[optimizer]") {
  struct Expect {
    const char *plugin;
    std::vector<std::string> names;
  };
  for (const Expect &e : {Expect{"cpu_adam", {"exp_avg", "exp_avg_sq"}},
                          Expect{"cpu_lion", {"exp_avg"}}, Expect{"cpu_adagrad", {"sum"}}}) {
    INFO(e.plugin);
    LoadedOptimizer optimizer(e.plugin);
    optimizer.init_state(10);
    for (uint32_t i = 0; i < e.names.size(); ++i) {
      std::string name;
      zf_dtype dtype = ZF_DTYPE_U8;
      CHECK(optimizer.state(i, &name, &dtype) == std::vector<float>(10, 0.0f));
      CHECK(name == e.names[i]);
      CHECK(dtype == ZF_DTYPE_F32);
    }
    const char *name = nullptr;
    zf_tensor_view view{};
    zf_error error{};
    CHECK(optimizer.api()->state_tensor(optimizer.object(), uint32_t(e.names.size()), &name, &view,
                                        &error) == ZF_DECLINED);
  }
}
