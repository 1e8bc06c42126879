// The SDK as a third party gets it: install the SDK component into a fresh prefix (headers, CMake
// package, README, data flow, example), build the installed example plugin with find_package
// against that prefix alone, check it exports only the two entry points, and let zfcore load and
// run it through ZFCORE_PLUGIN_PATH.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace zf;

TEST_CASE("a plugin built out of tree against the installed SDK loads and runs", "[sdk]") {
  std::string scratch = test::scratch_dir("sdk");
  std::string prefix = scratch + "/prefix", build = scratch + "/example";
  auto install = test::run_command("cmake --install " + test::binary_dir() + " --prefix " + prefix +
                                   " --component sdk");
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
  for (const char *file : {"include/zf/zf_plugin.h", "lib/cmake/zfcore/zfcore_plugin.map", "share/doc/zfcore/README.md",
                           "share/doc/zfcore/architecture.md", "share/doc/zfcore/examples/topk_selector/CMakeLists.txt",
                           "share/doc/zfcore/examples/topk_selector/topk_example.cpp"}) {
    INFO(file);
    CHECK(std::filesystem::exists(prefix + "/" + file));
  }
  auto configure = test::run_command("cmake -S " + prefix + "/share/doc/zfcore/examples/topk_selector -B " + build +
                                     " -DCMAKE_PREFIX_PATH=" + prefix + " -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF");
  INFO(configure.output);
  REQUIRE(configure.exit_code == 0);
  auto compile = test::run_command("cmake --build " + build);
  INFO(compile.output);
  REQUIRE(compile.exit_code == 0);

  // The version script leaves exactly the two entry points exported.
  auto symbols = test::run_command("nm -D --defined-only " + build + "/zf-selector-topk_example.so | awk '{print $3}' | sort");
  INFO(symbols.output);
  CHECK(symbols.exit_code == 0);
  CHECK(symbols.output == "zf_plugin_describe\nzf_plugin_negotiate\n");

  auto listed = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " plugins --params");
  CHECK_THAT(listed.output, Catch::Contains("selector   topk_example") && Catch::Contains("cpu,scores"));
  CHECK_THAT(listed.output, Catch::Contains("fraction of each weight's columns selected (0 = the run's zenflow.topk_ratio)"));

  // The selector is ZenFlow's plan: its choice decides which columns the CPU updates late, so two
  // ratios train differently.
  std::string zenflow = " --set train.steps=6 --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam "
                        "--set zenflow.update_interval=2 --set selector.plugin=topk_example --set run.output_dir=";
  std::string digests[2];
  for (int i = 0; i < 2; ++i) {
    std::string out = scratch + "/run" + std::to_string(i);
    auto run = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " run " + test::source_dir() +
                                 "/examples/linear_stack.toml" + zenflow + out + " --set selector.ratio=" +
                                 (i == 0 ? "0.25" : "0.5"));
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    CHECK_THAT(run.output, Catch::Contains("selector topk_example"));
    std::string summary = test::read_text(out + "/summary.json");
    CHECK(test::json_field(summary, "selected_column_fraction") == (i == 0 ? "0.25" : "0.5"));
    digests[i] = test::json_field(summary, "param_digest");
  }
  CHECK(digests[0] != digests[1]);

  auto bad = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " validate " +
                               test::source_dir() + "/examples/linear_stack.toml --set selector.plugin=topk_example " +
                               "--set selector.ratio=1.5");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Contains("selector.ratio = 1.5: must be in [0, 1]"));

  // An A/B that switches the selector back: the other plugin's key is named as its, and --unset drops it.
  std::ofstream(scratch + "/ab.toml") << test::read_text(test::source_dir() + "/examples/linear_stack.toml")
                                      << "\n[selector]\nplugin = \"topk_example\"\nratio = 0.25\n";
  std::string validate = "ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " validate " + scratch + "/ab.toml";
  auto foreign = test::run_command(validate + " --set selector.plugin=all");
  CHECK(foreign.exit_code != 0);
  CHECK_THAT(foreign.output, Catch::Contains("ab.toml:") &&
                                 Catch::Contains("selector.ratio is a parameter of selector plugin 'topk_example', not of 'all'") &&
                                 Catch::Contains("--unset selector.ratio"));
  auto dropped = test::run_command(validate + " --set selector.plugin=all --unset selector.ratio");
  INFO(dropped.output);
  CHECK(dropped.exit_code == 0);
}

// The SDK's zf::Config (a plugin's getters over its table) and the core's whole-run config are
// different classes: the core's is zf::RunConfig, so no program defines two zf::Config (an ODR
// violation that the linker would not report).
TEST_CASE("the zfcore executable defines no zf::Config: the core's config class is zf::RunConfig", "[sdk]") {
  auto symbols = test::run_command("nm -C --defined-only " + test::zfcore() + " | grep -c 'zf::RunConfig::' ; nm -C "
                                   "--defined-only " + test::zfcore() + " | grep -c 'zf::Config::'");
  INFO(symbols.output);
  std::string output = symbols.output;
  std::string run_config_count = output.substr(0, output.find('\n'));
  std::string config_count = output.substr(output.find('\n') + 1);
  CHECK(std::stoi(run_config_count) > 0);
  CHECK(std::stoi(config_count) == 0);
}
