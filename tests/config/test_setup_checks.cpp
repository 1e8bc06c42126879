// `zfcore validate` means it runs: every refusal a run makes for its config alone (before it sets
// anything up; engine/setup_checks.hpp), validate makes with the same message, and the fix a
// combination error offers is accepted. Fallback lists skip a known plugin that is not installed
// here, as one that declines; a name no build knows stays an error.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string write(const std::string &dir, const std::string &name, const std::string &text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

// The line of `output` that holds `part` ("" when none does).
std::string line_with(const std::string &output, const std::string &part) {
  std::stringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.find(part) != std::string::npos) return line;
  return "";
}

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
      {"missing_init_from", "", " --set model.type=llama --set model.init_from=" + dir + "/no_model", "no_model"},
      {"preset_on_linear_stack", "", " --set model.preset=gpt2", "model.preset does not apply to model.type = "
                                                                 "\"linear_stack\""},
      {"plugin_typo", "", " --set optimizer.plugin=[\"gpu_adamm\",\"cpu_adam\"]", "no optimizer plugin named 'gpu_adamm'"},
      {"plugin_range", "", " --set stage.reduce_bucket_size=0", "stage.reduce_bucket_size"},
      {"foreign_key", "[offload]\nplugin = \"cpu_optimizer\"\nqueue_depth = 8\n[optimizer]\nplugin = \"cpu_adam\"\n", "",
       "offload.queue_depth is a parameter of offload plugin 'nvme'"},
  };
  // A run on a CPU build refuses run.device = "cuda" first, while it opens the device: the same line
  // only where the build has the CUDA path; validate refuses it everywhere.
  const bool cuda_build = installed("optimizer", "gpu_adam");
  cases.push_back({"zenflow_cpu_full",
                   "[offload]\nplugin = \"cpu_full\"\n[optimizer]\nplugin = \"cpu_adam\"\n[zenflow]\n", "",
                   "offload plugin 'cpu_full' keeps the working parameters in host memory, but [zenflow]"});
  cases.push_back({"cpu_optimizer_on_gpu", "[optimizer]\nplugin = \"cpu_adam\"\n", " --set run.device=cuda",
                   "optimizer plugin 'cpu_adam' runs on the CPU but run.device = \"cuda\" keeps the master weights on "
                   "the GPU"});
  if (!cuda_build)
    cases.push_back({"not_installed", "", " --set optimizer.plugin=gpu_adam",
                     "optimizer plugin 'gpu_adam' is not installed here (zfcore has it in CUDA builds)"});
  for (const Case &c : cases) {
    INFO(c.name);
    const std::string file = write(dir, c.name + ".toml", kBase + c.toml);
    test::Outcome valid = test::run_command(test::zfcore() + " validate " + file + c.sets);
    test::Outcome run = test::run_command(test::zfcore() + " run " + file + c.sets + " --set run.output_dir=" + dir +
                                          "/out_" + c.name);
    INFO("validate: " << valid.output << "\nrun: " << run.output);
    CHECK(valid.exit_code == 1);
    CHECK(run.exit_code == 1);
    const std::string line = line_with(valid.output, c.message);
    CHECK(!line.empty());
    if (c.sets.find("run.device=cuda") == std::string::npos || cuda_build)
      CHECK(line == line_with(run.output, c.message));
    CHECK(!fs::exists(dir + "/out_" + c.name + "/steps.jsonl"));
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
    const std::string file = write(dir, c.name + ".toml", kBase + c.toml);
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

TEST_CASE("plugins: a fallback list skips a known plugin not installed here, and zfcore plugins lists both kinds",
          "[config][cli]") {
  std::string dir = test::scratch_dir("fallback_lists");
  const std::string file = write(dir, "list.toml", kBase + "[optimizer]\nplugin = [\"gpu_adam\", \"cpu_adam\"]\n");
  for (const char *command : {" validate ", " run "}) {
    test::Outcome outcome = test::run_command(test::zfcore() + command + file + " --set run.output_dir=" + dir + "/out");
    INFO(command << outcome.output);
    CHECK(outcome.exit_code == 0);
    if (!installed("optimizer", "gpu_adam"))
      CHECK_THAT(outcome.output, Catch::Contains("optimizer plugin 'gpu_adam' is not installed here (zfcore has it in "
                                                 "CUDA builds): skipped"));
  }
  // A key of one candidate goes to that one only: optimizer.threads is cpu_adam's, not adamw_ref's.
  const std::string keyed = write(dir, "keyed.toml", kBase + "[optimizer]\nplugin = [\"adamw_ref\", \"cpu_adam\"]\n"
                                                             "threads = 1\n");
  for (const char *command : {" validate ", " run "}) {
    test::Outcome outcome = test::run_command(test::zfcore() + command + keyed + " --set run.output_dir=" + dir + "/keyed");
    INFO(command << outcome.output);
    CHECK(outcome.exit_code == 0);
  }
  // A DeepSpeed config that keeps the optimizer where the model computes converts to the list.
  const std::string json = write(dir, "ds.json", R"({"train_micro_batch_size_per_gpu": 8})");
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
        CHECK_THAT(line_with(listing.output, " " + kind + "/" + name + " "), Catch::Contains("(zfcore has it in"));
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
    std::string block;
    bool inside = false;
    int number = 0;
    for (std::string line; std::getline(lines, line);) {
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
    const std::string file = write(dir, "block" + std::to_string(++index) + ".toml", toml);
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
      const std::string error = line_with(valid.output, "error: ");
      CHECK(!error.empty());
      CHECK(error == line_with(run.output, "error: "));
    }
  }
}

TEST_CASE("validate: a GPT-2 vocabulary on the byte tokenizer is said, with what to use instead", "[config][cli]") {
  std::string dir = test::scratch_dir("byte_vocab");
  const std::string corpus = write(dir, "corpus.txt", "a small text corpus\n");
  const std::string file = write(dir, "gpt2.toml", "[model]\npreset = \"gpt2\"\n[data]\ntype = \"text\"\npath = \"" +
                                                       corpus + "\"\n");
  test::Outcome valid = test::run_command(test::zfcore() + " validate " + file);
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
  CHECK_THAT(valid.output, Catch::Contains("data.tokenizer = \"byte\" gives 256 ids, and the model has a vocabulary of "
                                           "50257") &&
                               Catch::Contains("data.tokenizer = \"hf\""));
  // A model of the byte tokenizer's 256 ids: nothing to say.
  test::Outcome bytes = test::run_command(test::zfcore() + " validate " + file + " --set model.vocab=256");
  INFO(bytes.output);
  CHECK_THAT(bytes.output, !Catch::Contains("gives 256 ids"));
}
