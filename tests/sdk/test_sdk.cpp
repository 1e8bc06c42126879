// The SDK as a third party gets it: install the SDK component into a fresh prefix, build the
// out-of-tree example plugin with find_package against that prefix alone, and let zfcore load
// and run it through ZFCORE_PLUGIN_PATH.
#include "support/process.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("a plugin built out of tree against the installed SDK loads and runs", "[sdk]") {
  std::string scratch = test::scratch_dir("sdk");
  std::string prefix = scratch + "/prefix", build = scratch + "/example";
  auto install = test::run_command("cmake --install " + test::binary_dir() + " --prefix " + prefix +
                                   " --component sdk");
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
  auto configure = test::run_command("cmake -S " + test::source_dir() + "/sdk/examples/topk_selector -B " + build +
                                     " -DCMAKE_PREFIX_PATH=" + prefix + " -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF");
  INFO(configure.output);
  REQUIRE(configure.exit_code == 0);
  auto compile = test::run_command("cmake --build " + build);
  INFO(compile.output);
  REQUIRE(compile.exit_code == 0);

  auto listed = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " plugins --params");
  CHECK_THAT(listed.output, Catch::Contains("selector   topk_l1") && Catch::Contains("cpu,scores"));
  CHECK_THAT(listed.output, Catch::Contains("fraction of each weight's columns selected"));

  std::string out = scratch + "/run";
  auto run = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " run " + test::source_dir() +
                               "/examples/linear_stack.toml --set train.steps=3 --set selector.plugin=topk_l1 "
                               "--set selector.ratio=0.25 --set run.output_dir=" + out);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("selector topk_l1"));
  CHECK(test::json_field(test::read_text(out + "/summary.json"), "selected_column_fraction") == "0.25");

  auto bad = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " validate " +
                               test::source_dir() + "/examples/linear_stack.toml --set selector.plugin=topk_l1 " +
                               "--set selector.ratio=1.5");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Contains("selector.ratio = 1.5: must be in (0, 1]"));
}
