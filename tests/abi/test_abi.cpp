// The ABI negotiation matrix: each deliberately broken plugin gets its documented outcome and
// message, and none crashes the host. Also: every built-in plugin passes the same checks.
#include "config/config.hpp"
#include "plugin/plugin_instance.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <map>
#include <set>
#include <sstream>
#include <vector>

using namespace zf;

namespace {

std::string plugin_path(const std::string &name) {
  return std::string(ZF_ABI_PLUGIN_DIR) + "/zf-selector-" + name + ".so";
}

std::string rejection(const std::string &name) {
  PluginRegistry registry({ZF_ABI_PLUGIN_DIR});
  std::string reason;
  const PluginFile *file = registry.load(plugin_path(name), &reason);
  CHECK(file == nullptr);
  return reason;
}

}  // namespace

TEST_CASE("a well-formed C plugin loads, negotiates and runs", "[abi]") {
  PluginRegistry registry({ZF_ABI_PLUGIN_DIR});
  const PluginFile &file = registry.find(ZF_KIND_SELECTOR, "good");
  REQUIRE(std::string(file.descriptor->name) == "good");
  REQUIRE(file.abi_version == ZF_ABI_VERSION);
  auto runtime = Runtime::single_cpu();
  PluginConfig config(*file.descriptor, "selector");
  PluginInstance instance(file, *runtime, config);
  std::vector<uint8_t> mask(5, 7);
  zf_select_args args{};
  args.struct_size = sizeof args;
  args.column_count = 5;
  zf_error error{};
  zf_tensor_view mask_view{mask.data(), 5, ZF_DTYPE_U8, ZF_DEVICE_CPU, 0, 0};
  REQUIRE(instance.api<zf_selector_api>()->select(instance.object(), &args, {}, mask_view, &error) == ZF_OK);
  REQUIRE(mask == std::vector<uint8_t>{1, 0, 1, 0, 1});
}

TEST_CASE("broken plugins are rejected with their reason", "[abi]") {
  CHECK_THAT(rejection("noentry"), Catch::Contains("not a zfcore plugin") && Catch::Contains("zf_plugin_negotiate"));
  CHECK_THAT(rejection("oldmajor"), Catch::Contains("ABI too old") && Catch::Contains("0.9") &&
                                        Catch::Contains("rebuild"));
  CHECK_THAT(rejection("newmajor"), Catch::Contains("ABI too new") && Catch::Contains("2.0"));
  CHECK_THAT(rejection("wrongkind"), Catch::Contains("wrong kind") && Catch::Contains("file name says selector") &&
                                         Catch::Contains("descriptor says optimizer"));
  CHECK_THAT(rejection("short"), Catch::Contains("descriptor too short"));
  CHECK_THAT(rejection("mismatch"), Catch::Contains("name mismatch") && Catch::Contains("somebody_else") &&
                                        Catch::Contains("'mismatch'"));
  CHECK_THAT(rejection("nodescribe"), Catch::Contains("missing entry") && Catch::Contains("zf_plugin_describe"));
  CHECK_THAT(rejection("capmismatch"), Catch::Contains("ZF_CAP_SCORES") && Catch::Contains("'score'"));
  CHECK_THAT(rejection("norequired"), Catch::Contains("missing entry") && Catch::Contains("'select'"));
  CHECK_THAT(rejection("baddefault"), Catch::Contains("ratio") && Catch::Contains("not an integer"));
  CHECK_THAT(rejection("garbage"), Catch::Contains("cannot be loaded"));
}

TEST_CASE("create that declines is not a failure, create that fails stops with the plugin's message", "[abi]") {
  PluginRegistry registry({ZF_ABI_PLUGIN_DIR});
  auto runtime = Runtime::single_cpu();
  const PluginFile &declines = registry.find(ZF_KIND_SELECTOR, "declines");
  PluginConfig config(*declines.descriptor, "selector");
  CHECK_THROWS_MATCHES(PluginInstance(declines, *runtime, config), PluginDeclined,
                       Catch::Matchers::Message("selector plugin 'declines' declined: no accelerator of this kind on "
                                                "this machine"));
  const PluginFile &fails = registry.find(ZF_KIND_SELECTOR, "fails");
  CHECK_THROWS_MATCHES(PluginInstance(fails, *runtime, config), zf::Error,
                       Catch::Matchers::Message("selector plugin 'fails' failed to start: cannot open /dev/imaginary0"));
}

TEST_CASE("zfcore run falls back past a declining plugin and stops on a failing one", "[abi]") {
  std::string dir = test::scratch_dir("abi_run");
  std::string base = test::zfcore() + " run " + test::source_dir() +
                     "/examples/linear_stack.toml --set train.steps=2 --set run.output_dir=" + dir +
                     " --set run.plugin_path=" ZF_ABI_PLUGIN_DIR;
  {
    // A list tries candidates in order: "declines" is skipped with its reason logged.
    std::string file = dir + "/fallback.toml";
    std::string text = test::read_text(test::source_dir() + "/examples/linear_stack.toml");
    std::FILE *out = std::fopen(file.c_str(), "w");
    std::fprintf(out, "%s\n[selector]\nplugin = [\"declines\", \"good\"]\n", text.c_str());
    std::fclose(out);
    // A ZenFlow run: the selector's mask is its plan.
    auto outcome = test::run_command(test::zfcore() + " run " + file + " --set train.steps=2 --set run.output_dir=" +
                                     dir + " --set run.plugin_path=" ZF_ABI_PLUGIN_DIR +
                                     " --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam"
                                     " --set zenflow.update_interval=2");
    INFO(outcome.output);
    CHECK(outcome.exit_code == 0);
    CHECK_THAT(outcome.output, Catch::Contains("declined: no accelerator"));
    CHECK_THAT(outcome.output, Catch::Contains("selector good"));
    CHECK(test::json_field(test::read_text(dir + "/summary.json"), "selected_column_fraction").substr(0, 3) == "0.5");
  }
  auto failed = test::run_command(base + " --set selector.plugin=fails");
  INFO(failed.output);
  CHECK(failed.exit_code != 0);
  CHECK_THAT(failed.output, Catch::Contains("cannot open /dev/imaginary0"));
  auto declined = test::run_command(base + " --set selector.plugin=declines");
  CHECK(declined.exit_code != 0);
  CHECK_THAT(declined.output, Catch::Contains("no selector plugin could run here"));
}

TEST_CASE("zfcore plugins lists every rejected file with its reason and keeps going", "[abi]") {
  auto outcome = test::run_command("ZFCORE_PLUGIN_PATH=" ZF_ABI_PLUGIN_DIR " " + test::zfcore() + " plugins");
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  for (const char *name : {"noentry", "oldmajor", "newmajor", "wrongkind", "short", "mismatch", "nodescribe",
                           "capmismatch", "norequired", "baddefault", "garbage"})
    CHECK_THAT(outcome.output, Catch::Contains(std::string("zf-selector-") + name + ".so: "));
  CHECK_THAT(outcome.output, Catch::Contains("selector   good"));
}

TEST_CASE("zfcore plugins marks the plugins that report their memory (ABI 1.7, optimizers 1.9) with estimate", "[abi]") {
  auto outcome = test::run_command("ZFCORE_PLUGIN_PATH=" ZF_ABI_PLUGIN_DIR " " + test::zfcore() + " plugins");
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  std::map<std::string, std::string> line_of;  // "kind name" -> its line
  std::istringstream lines(outcome.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind >> name;
    line_of[kind + " " + name] = line;
  }
  for (const char *plugin : {"stage zero0", "stage zero1", "stage zero2", "stage zero3", "offload none",
                             "offload cpu_optimizer", "offload cpu_full", "offload nvme", "optimizer cpu_adam",
                             "optimizer cpu_lion", "optimizer cpu_adagrad", "optimizer adamw_ref"})
    CHECK_THAT(line_of[plugin], Catch::Contains(",estimate "));
  // A selector holds no memory of its own; the ABI 1.0 test stage has no such entry.
  for (const char *plugin : {"selector topk_l1", "stage faulty"}) {
    REQUIRE_FALSE(line_of[plugin].empty());
    CHECK_THAT(line_of[plugin], !Catch::Contains("estimate"));
  }
}

TEST_CASE("every built-in plugin passes the host's checks and starts with its defaults or names the key it needs", "[abi]") {
  PluginRegistry registry({PluginRegistry::builtin_dir()});
  std::vector<const PluginFile *> found;
  std::vector<Rejection> rejected;
  registry.scan(found, rejected);
  for (const Rejection &r : rejected) FAIL(r.path.string() + ": " + r.reason);
  std::set<std::string> names;
  for (const PluginFile *file : found) names.insert(std::string(kind_name(file->descriptor->kind)) + "/" + file->descriptor->name);
  for (const char *required : {"stage/zero0", "offload/none", "optimizer/adamw_ref", "selector/all"})
    CHECK(names.count(required) == 1);
  auto runtime = Runtime::single_cpu();
  for (const PluginFile *file : found) {
    INFO(file->path.string());
    PluginConfig config(*file->descriptor, kind_name(file->descriptor->kind));
    try {
      PluginInstance instance(*file, *runtime, config);
    } catch (const PluginDeclined &) {
      // Declining is allowed (e.g. a GPU plugin on this machine).
    } catch (const Error &e) {
      // So is naming a key without a sensible default (nvme's offload.path: where the state goes).
      INFO(e.what());
      CHECK(std::string(e.what()).find(" is required") != std::string::npos);
    }
  }
}

TEST_CASE("the host's copy and accumulate (ABI 1.2) move and sum host buffers and round once", "[abi]") {
  PluginRegistry registry({PluginRegistry::builtin_dir()});
  std::string reason;
  const PluginFile *file = registry.load(PluginRegistry::builtin_dir() / "zf-stage-zero0.so", &reason);
  INFO(reason);
  REQUIRE(file != nullptr);
  auto runtime = Runtime::single_cpu();
  PluginConfig config(*file->descriptor, "stage");
  PluginInstance instance(*file, *runtime, config);
  const zf_host *host = instance.host();
  REQUIRE(host->struct_size >= offsetof(zf_host, accumulate) + sizeof(void *));
  zf_error error{};

  std::vector<float> a = {1.5f, -2.0f, 3.25f}, b = {0, 0, 0};
  zf_tensor_view va{a.data(), 3, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0}, vb{b.data(), 3, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0};
  REQUIRE(host->copy(host, vb, va, nullptr, &error) == ZF_OK);
  CHECK(b == a);
  REQUIRE(host->accumulate(host, vb, va, nullptr, &error) == ZF_OK);
  CHECK(b == std::vector<float>({3.0f, -4.0f, 6.5f}));

  // bf16: the sum is computed in fp32 and rounded once (1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly).
  std::vector<uint16_t> x = {0x3f80, 0x3f80}, y = {0x3b80, 0x3b80};  // 1.0, and 2^-8
  zf_tensor_view vx{x.data(), 2, ZF_DTYPE_BF16, ZF_DEVICE_CPU, 0, 0}, vy{y.data(), 2, ZF_DTYPE_BF16, ZF_DEVICE_CPU, 0, 0};
  REQUIRE(host->accumulate(host, vx, vy, nullptr, &error) == ZF_OK);  // 1 + 2^-8: a tie, to even = 1.0
  CHECK(x[0] == 0x3f80);
  std::vector<uint16_t> two = {0x3c00, 0x3c00};  // 2^-7
  zf_tensor_view vtwo{two.data(), 2, ZF_DTYPE_BF16, ZF_DEVICE_CPU, 0, 0};
  REQUIRE(host->accumulate(host, vx, vtwo, nullptr, &error) == ZF_OK);  // 1 + 2^-7 is representable
  CHECK(x[0] == 0x3f81);

  // ABI 1.6: copy converts between the floating dtypes, rounding to nearest even (zero3 gathers
  // bf16 blocks from the fp32 master this way): 1 + 2^-8 is a tie (to 1.0), 1 + 1.5 x 2^-8 rounds up.
  std::vector<float> wide = {1.0f + 0x1p-8f, 1.0f + 0x1.8p-8f, -2.0f};
  std::vector<uint16_t> narrow(3);
  zf_tensor_view vwide{wide.data(), 3, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0};
  zf_tensor_view vnarrow{narrow.data(), 3, ZF_DTYPE_BF16, ZF_DEVICE_CPU, 0, 0};
  REQUIRE(host->copy(host, vnarrow, vwide, nullptr, &error) == ZF_OK);
  CHECK(narrow == std::vector<uint16_t>({0x3f80, 0x3f81, 0xc000}));
  std::vector<int64_t> integers(3);
  zf_tensor_view vintegers{integers.data(), 3, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0};
  CHECK(host->copy(host, vintegers, vwide, nullptr, &error) == ZF_ERROR_INVALID_ARGUMENT);  // not floating

  // Mismatched views are an error with the sizes, not a crash.
  zf_tensor_view short_view = va;
  short_view.numel = 2;
  CHECK(host->copy(host, vb, short_view, nullptr, &error) == ZF_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(std::string(error.message), Catch::Contains("copy: dst has 3 elements"));
  CHECK(host->accumulate(host, vb, vx, nullptr, &error) == ZF_ERROR_INVALID_ARGUMENT);
}
