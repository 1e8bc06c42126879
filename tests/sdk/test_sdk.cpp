// The SDK as a third party gets it: install the SDK component into a fresh prefix (headers, CMake
// package, README, changelog, data flow, examples), build the installed example plugins with
// find_package against that prefix alone, check they export only the two entry points, and let
// zfcore load and run them through ZFCORE_PLUGIN_PATH: the selector, the offload tier (oracle:
// cpu_optimizer's param_digest) and a test stage, whose memory `zfcore estimate` reports. The
// advice for a refused plugin names the installed ones that can do it, out-of-tree ones included.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

using namespace zf;

namespace {

// The SDK component installed into a fresh prefix under scratch.
std::string install_sdk(const std::string &scratch) {
  std::string prefix = scratch + "/prefix";
  auto install = test::run_command("cmake --install " + test::binary_dir() + " --prefix " + prefix +
                                   " --component sdk");
  INFO(install.output);
  REQUIRE(install.exit_code == 0);
  return prefix;
}

// Configures and builds the plugin project in source against the SDK in prefix alone.
void build_against(const std::string &prefix, const std::string &source, const std::string &build) {
  auto configure = test::run_command("cmake -S " + source + " -B " + build + " -DCMAKE_PREFIX_PATH=" + prefix +
                                     " -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF");
  INFO(configure.output);
  REQUIRE(configure.exit_code == 0);
  auto compile = test::run_command("cmake --build " + build);
  INFO(compile.output);
  REQUIRE(compile.exit_code == 0);
}

// The line of `output` that holds `key` after `from`.
std::string line_with(const std::string &output, const std::string &key, size_t from = 0) {
  size_t at = output.find(key, from);
  if (at == std::string::npos) return "";
  size_t begin = output.rfind('\n', at), end = output.find('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return output.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// The text of `output` between the first `open` and the next `close`; "" when absent.
std::string between(const std::string &output, const std::string &open, const std::string &close) {
  size_t begin = output.find(open);
  if (begin == std::string::npos) return "";
  begin += open.size();
  size_t end = output.find(close, begin);
  return end == std::string::npos ? "" : output.substr(begin, end - begin);
}

// The plugins of `kind` that `zfcore plugins` lists with capability `capability`, as the advice
// writes them: KIND.plugin = "a", "b" or "c", sorted.
std::string listed_with(const std::string &listing, const std::string &kind, const std::string &capability) {
  std::istringstream lines(listing);
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string k, name, version, abi, capabilities;
    if (fields >> k >> name >> version >> abi >> capabilities && k == kind &&
        ("," + capabilities + ",").find("," + capability + ",") != std::string::npos)
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::string text = kind + ".plugin = ";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("\"" + names[i] + "\"");
  return text;
}

}  // namespace

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

TEST_CASE("an offload tier built out of tree trains as cpu_optimizer does and reports its memory", "[sdk][offload]") {
  std::string scratch = test::scratch_dir("sdk_offload");
  std::string prefix = install_sdk(scratch), build = scratch + "/example";
  for (const char *file : {"share/doc/zfcore/CHANGELOG.md", "share/doc/zfcore/examples/mmap_offload/CMakeLists.txt",
                           "share/doc/zfcore/examples/mmap_offload/mmap_offload.cpp"}) {
    INFO(file);
    CHECK(std::filesystem::exists(prefix + "/" + file));
  }
  build_against(prefix, prefix + "/share/doc/zfcore/examples/mmap_offload", build);
  auto symbols = test::run_command("nm -D --defined-only " + build + "/zf-offload-mmap_example.so | awk '{print $3}' | sort");
  CHECK(symbols.output == "zf_plugin_describe\nzf_plugin_negotiate\n");

  // Tiles of 8192 elements (bucket_size 5000, rounded up to 4096 bytes): every step maps dozens.
  const std::string env = "ZFCORE_PLUGIN_PATH=" + build + " ";
  const std::string common = " --set train.steps=4 --set optimizer.plugin=cpu_adam --set optimizer.threads=1 "
                             "--set offload.bucket_size=5000 --set run.output_dir=";
  std::string files = scratch + "/state";
  std::filesystem::create_directories(files);
  std::string summaries[2];
  const std::string offloads[2] = {"cpu_optimizer", "mmap_example --set offload.path=" + files};
  for (int i = 0; i < 2; ++i) {
    std::string out = scratch + "/run" + std::to_string(i);
    auto run = test::run_command(env + test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml" +
                                 common + out + " --set offload.plugin=" + offloads[i]);
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    summaries[i] = test::read_text(out + "/summary.json");
  }
  CHECK(test::json_field(summaries[1], "param_digest").size() == 16);
  CHECK(test::json_field(summaries[1], "param_digest") == test::json_field(summaries[0], "param_digest"));
  CHECK(test::json_field(summaries[1], "final_loss") == test::json_field(summaries[0], "final_loss"));
  CHECK(std::stod(test::json_field(summaries[1], "nvme_bytes_written")) > 0);  // the state went through the files
  CHECK(std::filesystem::is_empty(files));                                      // and they went with the run
  const uint64_t p = 263168;  // linear_stack: 4 blocks of 256 x 256 + 256 elements; Adam's 8 bytes of state
  CHECK(test::ledger_bytes(summaries[1], "memory_peak_bytes", "nvme.mmap_example.state") == 8 * p);

  // The estimate says what the ledger showed: the state on disk.
  auto estimate = test::run_command(env + test::zfcore() + " estimate --bytes " + test::source_dir() +
                                    "/examples/linear_stack.toml --set offload.plugin=mmap_example "
                                    "--set optimizer.plugin=cpu_adam");
  INFO(estimate.output);
  REQUIRE(estimate.exit_code == 0);
  const size_t table = estimate.output.find("offload mmap_example: per rank, bytes on each tier");
  REQUIRE(table != std::string::npos);
  char row[160];
  // zero0: params and grads stay (4P + 4P); master and the host copy of the gradients pinned (4P + 4P); state on disk.
  std::snprintf(row, sizeof row, "  %-6s %14llu %14llu %14llu", "zero0", (unsigned long long)(8 * p),
                (unsigned long long)(8 * p), (unsigned long long)(8 * p));
  CHECK(line_with(estimate.output, "zero0", table).rfind(row, 0) == 0);
}

TEST_CASE("a stage built out of tree gets its own row in zfcore estimate", "[sdk][stage]") {
  std::string scratch = test::scratch_dir("sdk_stage");
  std::string prefix = install_sdk(scratch), build = scratch + "/stage";
  build_against(prefix, test::source_dir() + "/tests/sdk/replica_stage", build);
  const std::string command = "ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " estimate --bytes " +
                              test::source_dir() + "/examples/linear_stack.toml --world 2 --set stage.plugin=replica_example";
  auto estimate = test::run_command(command);
  INFO(estimate.output);
  REQUIRE(estimate.exit_code == 0);
  // Every rank holds everything: zero0's bytes, reported by the plugin itself, and its formula.
  std::string zero0 = line_with(estimate.output, "  zero0 ");
  std::string mine = line_with(estimate.output, "  replica_example ");
  REQUIRE(zero0.size() > 110);
  REQUIRE(mine.size() > 110);
  CHECK(mine.substr(18, 14 * 7 + 6) == zero0.substr(9, 14 * 7 + 6));
  CHECK_THAT(mine, Catch::EndsWith("<- this config"));
  CHECK_THAT(estimate.output, Catch::Contains("  replica_example: params cP, grads cP, master 4P, state kP"));
  // Under an offload tier its bytes move as any stage's do.
  auto offloaded = test::run_command(command + " --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam");
  INFO(offloaded.output);
  CHECK_THAT(line_with(offloaded.output, "  replica_example ", offloaded.output.find("offload cpu_optimizer")),
             Catch::EndsWith("<- this config") && !Catch::Contains("no estimate"));
  // And it trains.
  auto run = test::run_command("ZFCORE_PLUGIN_PATH=" + build + " " + test::zfcore() + " run " + test::source_dir() +
                               "/examples/linear_stack.toml --set train.steps=2 --set stage.plugin=replica_example "
                               "--set run.output_dir=" + scratch + "/run");
  INFO(run.output);
  CHECK(run.exit_code == 0);
}

TEST_CASE("advice names the installed plugins that have what a refused one lacks (out-of-tree ones too)",
          "[sdk][offload]") {
  std::string scratch = test::scratch_dir("sdk_advice");
  std::string prefix = install_sdk(scratch), offload = scratch + "/offload", optimizer = scratch + "/optimizer";
  build_against(prefix, prefix + "/share/doc/zfcore/examples/mmap_offload", offload);
  build_against(prefix, test::source_dir() + "/tests/sdk/gpu_only_optimizer", optimizer);
  const std::string env = "ZFCORE_PLUGIN_PATH=" + offload + ":" + optimizer + " ";
  const std::string run = test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml " +
                          "--set train.steps=1 --set run.output_dir=" + scratch + "/run ";

  // A GPU-only optimizer where the master lives in host memory (mmap_example keeps it there): the
  // advice is every installed CPU optimizer, as `zfcore plugins` lists them, not a fixed few.
  auto listing = test::run_command(env + test::zfcore() + " plugins");
  INFO(listing.output);
  REQUIRE(listing.exit_code == 0);
  REQUIRE_THAT(listing.output, Catch::Contains("optimizer  gpu_only_example") && Catch::Contains("offload    mmap_example"));
  const std::string cpu_optimizers = listed_with(listing.output, "optimizer", "cpu");
  CHECK_THAT(cpu_optimizers, Catch::Contains("\"cpu_adam\"") && !Catch::Contains("gpu_only_example"));
  auto gpu_only = test::run_command(env + run + "--set optimizer.plugin=gpu_only_example --set offload.plugin=mmap_example");
  INFO(gpu_only.output);
  CHECK(gpu_only.exit_code != 0);
  CHECK_THAT(gpu_only.output, Catch::Contains("optimizer plugin 'gpu_only_example' runs on the GPU but offload plugin "
                                              "'mmap_example' keeps the master weights in host memory: use a CPU "
                                              "optimizer (" + cpu_optimizers + ")"));
  CHECK(gpu_only.output.find("step 1") == std::string::npos);

  // ZenFlow under an offload that keeps the master where the model computes: the advice lists the
  // installed offload plugins that move gradients and parameters, the out-of-tree one among them.
  const std::string zenflow = run + "--set zenflow.topk_ratio=0.1 --set offload.plugin=";
  const std::string needs = "it needs an offload plugin that keeps the master weights in host memory and moves "
                            "gradients and parameters (";
  auto with = test::run_command(env + zenflow + "none");
  INFO(with.output);
  CHECK(with.exit_code != 0);
  std::string advice = between(with.output, needs, "), not 'none'");
  CHECK_THAT(advice, Catch::StartsWith("offload.plugin = ") && Catch::Contains("\"mmap_example\"") &&
                         Catch::Contains("\"cpu_optimizer\"") && !Catch::Contains("\"none\""));
  // Without its directory on the path, it is not offered.
  auto without = test::run_command("ZFCORE_PLUGIN_PATH= " + zenflow + "none");
  INFO(without.output);
  CHECK(without.exit_code != 0);
  advice = between(without.output, needs, "), not 'none'");
  CHECK_THAT(advice, Catch::Contains("\"cpu_optimizer\"") && !Catch::Contains("mmap_example"));
  // cpu_full keeps the working parameters in host memory: the others are offered, not itself.
  auto full = test::run_command(env + zenflow + "cpu_full --set optimizer.plugin=cpu_adam");
  INFO(full.output);
  CHECK(full.exit_code != 0);
  advice = between(full.output, "use an offload plugin that keeps them there and the master weights in host memory (",
                   ")");
  CHECK_THAT(advice, Catch::Contains("\"mmap_example\"") && Catch::Contains("\"cpu_optimizer\"") &&
                         !Catch::Contains("cpu_full"));
}
