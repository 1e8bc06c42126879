// `zfcore validate` means it runs: every refusal a run makes for its config alone (before it sets
// anything up; engine/setup_checks.hpp), validate makes with the same message, and the fix a
// combination error offers is accepted. Fallback lists skip a known plugin that is not installed
// here, as one that declines; a name no build knows stays an error.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace zf;
namespace fs = std::filesystem;

namespace {

bool installed(const std::string &kind, const std::string &name) {
  return fs::exists(test::binary_dir() + "/lib/zfcore/plugins/zf-" + kind + "-" + name + ".so");
}

const std::string kBase = "[run]\nprogress = \"off\"\n[model]\ntype = \"linear_stack\"\nhidden = 32\nlayers = 2\n"
                          "[data]\ntype = \"random\"\nsamples = 64\n[train]\nsteps = 2\nmicro_batch = 8\n"
                          "[checkpoint]\nfinal = false\n";

}  // namespace

TEST_CASE("validate: every refusal of a run's setup checks is validate's, with the same message", "[config][cli]") {
  std::string dir = test::scratch_dir("setup_refusals");
  fs::create_directories(dir + "/nvme");
  struct Case {
    std::string name, toml, sets, message;
  };
  std::vector<Case> cases = {
      {"zenflow_ratio", "[offload]\nplugin = \"cpu_optimizer\"\nratio = 0.3\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n",
       "", "offload.ratio = 0.3 and [zenflow] both choose what the device updates"},
      {"zenflow_offload_params",
       "[offload]\nplugin = \"nvme\"\npath = \"" + dir + "/nvme\"\noffload_params = true\n[optimizer]\nplugin = "
       "\"cpu_adam\"\n[zenflow]\n",
       "", "offload.offload_params = true keeps the working parameters in host memory, but [zenflow]"},
      {"zenflow_no_offload", "[zenflow]\n", "", "[zenflow] updates the unselected columns on the CPU, so it needs an "
                                                 "offload plugin"},
      {"zenflow_keys", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n",
       " --set zenflow.select_strategy=auto --set zenflow.select_interval=3", "zenflow.select_interval"},
      {"zenflow_auto_staggered", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n",
       " --set zenflow.update_interval=auto", "zenflow.update_interval = \"auto\" ends an interval"},
      {"zenflow_selected_state", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n",
       " --set zenflow.offload_selected_state=true", "zenflow.offload_selected_state = true is not supported yet"},
      {"zenflow_row_major", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n",
       " --set model.column_major=false", "model.column_major = false, but ZenFlow updates whole gradient columns"},
      {"eval_without_held_out", "", " --set train.eval_every=1", "train.eval_every = 1 but the data has no held-out part"},
      {"export_linear_stack", "", " --set checkpoint.export_hf=" + dir + "/hf", "checkpoint.export_hf: model.type = "
                                                                               "\"linear_stack\" has no Hugging Face format"},
      {"missing_text", "", " --set data.type=text --set data.path=" + dir + "/absent.txt", "absent.txt"},
      {"missing_alpaca", "", " --set data.type=alpaca --set data.path=" + dir + "/absent.json", "absent.json"},
      {"missing_eval_path", "", " --set data.type=text --set data.path=" + dir + "/corpus.txt --set "
                                "data.eval_path=" + dir + "/absent_eval.txt", "absent_eval.txt"},
      {"missing_init_from", "", " --set model.type=llama --set model.init_from=" + dir + "/no_model", "no_model"},
      {"preset_on_linear_stack", "", " --set model.preset=gpt2", "model.preset does not apply to model.type = "
                                                                 "\"linear_stack\""},
      {"plugin_typo", "", " --set optimizer.plugin=[\"gpu_adamm\",\"cpu_adam\"]", "no optimizer plugin named 'gpu_adamm'"},
      {"plugin_range", "", " --set stage.reduce_bucket_size=0", "stage.reduce_bucket_size"},
      {"foreign_key", "[offload]\nplugin = \"cpu_optimizer\"\nqueue_depth = 8\n[optimizer]\nplugin = \"cpu_adam\"\n", "",
       "offload.queue_depth is a parameter of offload plugin 'nvme'"},
  };
  std::ofstream(dir + "/corpus.txt") << "a small text corpus\n";
  const bool cuda_build = installed("optimizer", "gpu_adam");
  if (cuda_build)
    cases.push_back({"gpu_optimizer_host_master", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = "
                     "\"gpu_adam\"\n", " --set run.device=cuda",
                     "optimizer plugin 'gpu_adam' runs on the GPU but offload plugin 'cpu_optimizer' keeps the master "
                     "weights in host memory"});
  cases.push_back({"zenflow_cpu_full",
                   "[offload]\nplugin = \"cpu_full\"\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n", "",
                   "offload plugin 'cpu_full' keeps the working parameters in host memory, but [zenflow]"});
  cases.push_back({"cpu_optimizer_on_gpu", "[optimizer]\nplugin = \"cpu_adam\"\n", " --set run.device=cuda",
                   "optimizer plugin 'cpu_adam' runs on the CPU but run.device = \"cuda\" keeps the master weights on "
                   "the GPU"});
  if (!cuda_build) {
    cases.push_back({"not_installed", "", " --set optimizer.plugin=gpu_adam",
                     "optimizer plugin 'gpu_adam' is not installed here (zfcore has it in CUDA builds)"});
    // Refused last, once the rest of the config passed: a build without CUDA runs nothing on a GPU.
    cases.push_back({"cuda_on_cpu_build", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = \"cpu_adam\"\n",
                     " --set run.device=cuda", "run.device = \"cuda\": this zfcore was built without the CUDA path"});
  }
  for (const Case &c : cases) {
    INFO(c.name);
    const std::string file = test::write_file(dir, c.name + ".toml", kBase + c.toml);
    test::Outcome valid = test::run_command(test::zfcore() + " validate " + file + c.sets);
    test::Outcome run = test::run_command(test::zfcore() + " run " + file + c.sets + " --set run.output_dir=" + dir +
                                          "/out_" + c.name);
    INFO("validate: " << valid.output << "\nrun: " << run.output);
    CHECK(valid.exit_code == 1);
    CHECK(run.exit_code == 1);
    const std::string line = test::line_with(valid.output, c.message);
    CHECK(!line.empty());
    CHECK(line == test::line_with(run.output, c.message));
    CHECK(!fs::exists(dir + "/out_" + c.name + "/steps.jsonl"));
  }
}

// The plugin names a message offers as `TABLE.plugin = "a", "b" or "c"` (its last such list).
std::vector<std::string> offered(const std::string &message, const std::string &table) {
  std::vector<std::string> names;
  const size_t list = message.rfind(table + ".plugin = ");
  if (list == std::string::npos) return names;
  const std::string text = message.substr(list, message.find(')', list) - list);
  for (size_t open = text.find('"'); open != std::string::npos; open = text.find('"', text.find('"', open + 1) + 1))
    names.push_back(text.substr(open + 1, text.find('"', open + 1) - open - 1));
  return names;
}

TEST_CASE("validate: a plugin combination's refusal offers only plugins that validate in its place, and an offload "
          "that keeps the parameters in host memory is refused beside [zenflow] for what it declares",
          "[config][cli]") {
  std::string dir = test::scratch_dir("setup_offered");
  fs::create_directories(dir + "/nvme");
  // host_params: cpu_full's plan and estimate under another name (tests/config/host_params_offload.cpp).
  const std::string path = " --set run.plugin_path=" + test::binary_dir() + "/tests/abi_plugins";
  struct Case {
    std::string name, toml, table, message;
  };
  const std::string zenflow = "[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n";
  const std::vector<Case> cases = {
      {"zenflow_cpu_full", "[offload]\nplugin = \"cpu_full\"\n" + zenflow, "offload",
       "offload plugin 'cpu_full' keeps the working parameters in host memory, but [zenflow] updates the selected "
       "columns where the model computes every step"},
      {"zenflow_host_params", "[offload]\nplugin = \"host_params\"\n" + zenflow, "offload",
       "offload plugin 'host_params' keeps the working parameters in host memory, but [zenflow] updates the selected "
       "columns where the model computes every step"},
      {"zenflow_none", "[offload]\nplugin = \"none\"\n" + zenflow, "offload",
       "[zenflow] updates the unselected columns on the CPU, so it needs an offload plugin"},
      {"nvme_own_state", "[offload]\nplugin = \"nvme\"\npath = \"" + dir + "/nvme\"\n[optimizer]\nplugin = \"adamw_ref\"\n",
       "optimizer", "offload plugin 'nvme' puts the optimizer state on disk, so the host must hold it"},
      {"ratio_own_state", "[offload]\nplugin = \"cpu_optimizer\"\nratio = 0.5\n[optimizer]\nplugin = \"adamw_ref\"\n",
       "optimizer", "offload.ratio < 1 moves the device part's optimizer state between the host and the device"},
      {"zenflow_own_state", "[offload]\nplugin = \"cpu_optimizer\"\n[optimizer]\nplugin = \"adamw_ref\"\n[zenflow]\n",
       "optimizer", "[zenflow] moves each column's optimizer state between the host and the device"}};
  for (const Case &c : cases) {
    INFO(c.name);
    const std::string file = test::write_file(dir, c.name + ".toml", kBase + c.toml);
    test::Outcome valid = test::run_command(test::zfcore() + " validate " + file + path);
    test::Outcome run = test::run_command(test::zfcore() + " run " + file + path + " --set run.output_dir=" + dir +
                                          "/out_" + c.name);
    INFO("validate: " << valid.output << "\nrun: " << run.output);
    CHECK(valid.exit_code == 1);
    CHECK(run.exit_code == 1);
    // At the line of the table's plugin key, with run's line.
    const std::string text = kBase + c.toml;
    const size_t key = text.find("[" + c.table + "]\nplugin = ");
    const std::string line = test::line_with(valid.output, c.message);
    const long key_line = std::count(text.begin(), text.begin() + long(key), '\n') + 2;
    CHECK_THAT(line, Catch::Contains(file + ":" + std::to_string(key_line) + ":"));
    CHECK(line == test::line_with(run.output, c.message));
    CHECK(!fs::exists(dir + "/out_" + c.name + "/steps.jsonl"));
    const std::vector<std::string> names = offered(line, c.table);
    CHECK(!names.empty());
    for (const std::string &name : names) {
      const std::string fix =
          " --set " + c.table + ".plugin=" + name + (name == "nvme" ? " --set offload.path=" + dir + "/nvme" : "");
      test::Outcome fixed = test::run_command(test::zfcore() + " validate " + file + path + fix);
      INFO(fix << "\n" << fixed.output);
      CHECK(fixed.exit_code == 0);
    }
  }
}

TEST_CASE("validate: a combination error's fix, applied as written, validates and runs", "[config][cli]") {
  std::string dir = test::scratch_dir("setup_fixes");
  fs::create_directories(dir + "/nvme");
  struct Case {
    std::string name, toml, fix;
  };
  const std::vector<Case> cases = {
      {"ratio", "[offload]\nplugin = \"cpu_optimizer\"\nratio = 0.3\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n",
       "--unset offload.ratio"},
      {"offload_params",
       "[offload]\nplugin = \"nvme\"\npath = \"" + dir + "/nvme\"\noffload_params = true\n[optimizer]\nplugin = "
       "\"cpu_adam\"\n[zenflow]\n",
       "--unset offload.offload_params"}};
  for (const Case &c : cases) {
    INFO(c.name);
    const std::string file = test::write_file(dir, c.name + ".toml", kBase + c.toml);
    test::Outcome refused = test::run_command(test::zfcore() + " validate " + file);
    INFO(refused.output);
    REQUIRE(refused.exit_code == 1);
    CHECK_THAT(refused.output, Catch::Contains(file + ":") && Catch::Contains("(" + c.fix + ")"));
    test::Outcome fixed = test::run_command(test::zfcore() + " validate " + file + " " + c.fix);
    INFO(fixed.output);
    CHECK(fixed.exit_code == 0);
    test::Outcome run = test::run_command(test::zfcore() + " run " + file + " " + c.fix + " --set run.output_dir=" +
                                          dir + "/out_" + c.name);
    INFO(run.output);
    CHECK(run.exit_code == 0);
  }
}

TEST_CASE("validate: a fallback optimizer list is checked by the plugin the run takes, so the quickstart takes nvme "
          "and ZenFlow", "[config][cli]") {
  std::string dir = test::scratch_dir("setup_fallback_taken");
  fs::create_directories(dir + "/nvme");
  const std::string quickstart = test::source_dir() + "/examples/quickstart.toml";  // ["cpu_adam", "adamw_ref"]
  const std::string nvme = " --set offload.plugin=nvme --set offload.path=" + dir + "/nvme";
  const std::string zenflow = " --set offload.plugin=cpu_optimizer --set zenflow.topk_ratio=0.5";
  for (const std::string &swap : {nvme, zenflow}) {
    test::Outcome valid = test::run_command(test::zfcore() + " validate " + quickstart + swap);
    INFO(valid.output);
    CHECK(valid.exit_code == 0);
    // The same list the other way round takes adamw_ref, which keeps its own state: refused, naming it.
    test::Outcome refused = test::run_command(test::zfcore() + " validate " + quickstart + swap +
                                              " --set 'optimizer.plugin=[\"adamw_ref\", \"cpu_adam\"]'");
    INFO(refused.output);
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.output, Catch::Contains("so the host must hold it: optimizer plugin 'adamw_ref' keeps its own"));
  }
  test::Outcome run = test::run_command(test::zfcore() + " run " + quickstart + nvme + " --set train.steps=2 "
                                        "--set train.eval_every=0 --set sample.tokens=0 --set run.progress=off "
                                        "--set run.output_dir=" + dir + "/out");
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK(test::read_text(dir + "/out/summary.json").find("\"optimizer\":{\"name\":\"cpu_adam\"") != std::string::npos);
}

TEST_CASE("plugins: a fallback list skips a known plugin not installed here, and zfcore plugins lists both kinds",
          "[config][cli]") {
  std::string dir = test::scratch_dir("fallback_lists");
  const std::string file = test::write_file(dir, "list.toml", kBase + "[optimizer]\nplugin = [\"gpu_adam\", \"cpu_adam\"]\n");
  for (const char *command : {" validate ", " run "}) {
    test::Outcome outcome = test::run_command(test::zfcore() + command + file + " --set run.output_dir=" + dir + "/out");
    INFO(command << outcome.output);
    CHECK(outcome.exit_code == 0);
    if (!installed("optimizer", "gpu_adam"))
      CHECK_THAT(outcome.output, Catch::Contains("optimizer plugin 'gpu_adam' is not installed here (zfcore has it in "
                                                 "CUDA builds): skipped"));
  }
  // A key of one candidate goes to that one only: optimizer.threads is cpu_adam's, not adamw_ref's.
  const std::string keyed = test::write_file(dir, "keyed.toml", kBase + "[optimizer]\nplugin = [\"adamw_ref\", \"cpu_adam\"]\n"
                                                             "threads = 1\n");
  for (const char *command : {" validate ", " run "}) {
    test::Outcome outcome = test::run_command(test::zfcore() + command + keyed + " --set run.output_dir=" + dir + "/keyed");
    INFO(command << outcome.output);
    CHECK(outcome.exit_code == 0);
  }
  // A DeepSpeed config that keeps the optimizer where the model computes converts to the list.
  const std::string json = test::write_file(dir, "ds.json", R"({"train_micro_batch_size_per_gpu": 8})");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + json);
  CHECK_THAT(converted.output, Catch::Contains("plugin = [\"gpu_adam\", \"cpu_adam\"]\n"));
  test::Outcome on_cpu = test::run_command(test::zfcore() + " run " + json +
                                           " --set model.type=linear_stack --set model.hidden=32 --set model.layers=2 "
                                           "--set data.type=random --set data.samples=64 --set train.steps=2 "
                                           "--set run.device=cpu --set run.output_dir=" + dir + "/ds");
  INFO(on_cpu.output);
  CHECK(on_cpu.exit_code == 0);

  // Every plugin any build has (plugins/*/*/CMakeLists.txt) is listed, installed or known but not
  // installed here.
  test::Outcome listing = test::run_command(test::zfcore() + " plugins");
  REQUIRE(listing.exit_code == 0);
  INFO(listing.output);
  int count = 0;
  for (const auto &kind_dir : fs::directory_iterator(test::source_dir() + "/plugins")) {
    if (!kind_dir.is_directory()) continue;
    for (const auto &plugin_dir : fs::directory_iterator(kind_dir.path())) {
      std::ifstream cmake(plugin_dir.path() / "CMakeLists.txt");
      std::stringstream text;
      text << cmake.rdbuf();
      const std::string source = text.str();
      const size_t call = source.find("zf_add_plugin(");
      if (call == std::string::npos) continue;
      std::stringstream words(source.substr(call + 14));
      std::string kind, name;
      words >> kind >> name;
      if (name.find("${") != std::string::npos) name = name.substr(0, name.find("${")) + "1";  // topk_l${norm}
      ++count;
      if (installed(kind, name))
        CHECK_THAT(listing.output, Catch::Contains(" " + name + " "));
      else
        CHECK_THAT(test::line_with(listing.output, " " + kind + "/" + name + " "), Catch::Contains("(zfcore has it in"));
    }
  }
  CHECK(count >= 15);
}

TEST_CASE("validate: every TOML config of README.md and docs/ runs, or validate refuses it with run's message",
          "[config][cli]") {
  std::string dir = test::scratch_dir("doc_configs");
  fs::create_directories(dir + "/nvme");
  std::vector<std::pair<std::string, std::string>> blocks;  // (where, TOML)
  std::vector<std::string> pages = {test::source_dir() + "/README.md"};
  for (const auto &entry : fs::directory_iterator(test::source_dir() + "/docs"))
    if (entry.path().extension() == ".md") pages.push_back(entry.path().string());
  for (const std::string &page : pages) {
    std::stringstream lines(test::read_text(page));
    std::string block, previous;
    bool inside = false;
    int number = 0;
    for (std::string line; std::getline(lines, line); previous = line) {
      // A config in a block without the toml tag would escape this test.
      const bool table_header = line.size() > 2 && line[0] == '[' && line.back() == ']';
      if (!inside && previous == "```" && table_header)
        FAIL_CHECK(page << ": the block that starts with " << line << " is a config: open it with ```toml");
      if (!inside && line == "```toml") {
        inside = true;
        block.clear();
      } else if (inside && line.rfind("```", 0) == 0) {
        inside = false;
        blocks.emplace_back(fs::path(page).filename().string() + " block " + std::to_string(++number), block);
      } else if (inside) {
        block += line + "\n";
      }
    }
  }
  REQUIRE(blocks.size() >= 5);
  int index = 0;
  for (const auto &[where, toml] : blocks) {
    INFO(where << "\n" << toml);
    const std::string file = test::write_file(dir, "block" + std::to_string(++index) + ".toml", toml);
    // The tables a snippet leaves out: a small model on random data; its paths: scratch directories.
    std::string sets = " --set train.steps=2 --set run.progress=off --set checkpoint.final=false";
    if (toml.find("[model]") == std::string::npos) sets += " --set model.type=linear_stack --set model.hidden=32 "
                                                          "--set model.layers=2";
    if (toml.find("[data]") == std::string::npos) sets += " --set data.type=random --set data.samples=64";
    if (toml.find("[train]") == std::string::npos) sets += " --set train.micro_batch=8";
    if (toml.find("path = \"/") != std::string::npos) sets += " --set offload.path=" + dir + "/nvme";
    test::Outcome valid = test::run_command(test::zfcore() + " validate " + file + sets);
    test::Outcome run = test::run_command(test::zfcore() + " run " + file + sets + " --set run.output_dir=" + dir +
                                          "/out" + std::to_string(index));
    INFO("validate: " << valid.output << "\nrun: " << run.output);
    if (valid.exit_code == 0) {
      CHECK(run.exit_code == 0);
    } else {
      CHECK(run.exit_code == valid.exit_code);
      const std::string error = test::line_with(valid.output, "error: ");
      CHECK(!error.empty());
      CHECK(error == test::line_with(run.output, "error: "));
    }
  }
}

TEST_CASE("validate: a GPT-2 vocabulary on the byte tokenizer is said, with what to use instead", "[config][cli]") {
  std::string dir = test::scratch_dir("byte_vocab");
  const std::string corpus = test::write_file(dir, "corpus.txt", "a small text corpus\n");
  const std::string file = test::write_file(dir, "gpt2.toml", "[model]\npreset = \"gpt2\"\n[data]\ntype = \"text\"\npath = \"" +
                                                       corpus + "\"\n");
  test::Outcome valid = test::run_command(test::zfcore() + " validate " + file);
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
  CHECK_THAT(valid.output, Catch::Contains("data.tokenizer = \"byte\" gives 257 ids (the 256 bytes and EOS), and the "
                                           "model has a vocabulary of 50257") &&
                               Catch::Contains("50000 embeddings are never trained") &&
                               Catch::Contains("data.tokenizer = \"hf\"") && Catch::Contains("vocab = 257"));
  // A model of the byte tokenizer's 257 ids (the quickstart's, as docs/data.md says), or of its 256
  // bytes alone: nothing to say, and the advice never contradicts itself.
  for (const std::string vocab : {"257", "256"}) {
    test::Outcome bytes = test::run_command(test::zfcore() + " validate " + file + " --set model.vocab=" + vocab);
    INFO(bytes.output);
    CHECK(bytes.exit_code == 0);
    CHECK_THAT(bytes.output, !Catch::Contains("never trained"));
  }
  test::Outcome quickstart = test::run_command(test::zfcore() + " validate " + test::source_dir() +
                                               "/examples/quickstart.toml");
  INFO(quickstart.output);
  CHECK(quickstart.exit_code == 0);
  CHECK_THAT(quickstart.output, !Catch::Contains("never trained"));
}
