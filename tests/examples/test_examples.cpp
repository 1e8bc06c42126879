// The example configs users start from (examples/**/*.toml), checked on a CPU-only machine with
// small stand-ins for what they read: the Hugging Face model directory (model.init_from,
// data.tokenizer_path: the tiny fixtures of tests/fixtures with a tokenizer of the model's
// family), the Alpaca JSON file (data.path) and the NVMe directory (offload.path), given with
// --set so the rest of each file is checked as written.
//   - Every example passes `zfcore validate`; run.device = "cuda" stays (validate needs no GPU).
//     gpu_adam exists only in CUDA builds: without it the example is validated with cpu_adam in
//     its place (a WARN says so), which checks every other key.
//   - The Alpaca fine-tunes train 9 steps with run.device = "cpu" on a tiny model of their
//     family, exported with the stand-in tokenizer's files as a Hugging Face directory.
//   - README.md's Examples section lists exactly the files there are.
// Tag [examples].
#include "config/config.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

using namespace zf;
namespace fs = std::filesystem;

namespace {

// Every examples/**/*.toml, relative to the repository root, sorted.
std::vector<std::string> example_files() {
  std::vector<std::string> files;
  fs::path root = fs::path(test::source_dir()) / "examples";
  for (const auto &entry : fs::recursive_directory_iterator(root))
    if (entry.is_regular_file() && entry.path().extension() == ".toml")
      files.push_back(fs::relative(entry.path(), test::source_dir()).string());
  std::sort(files.begin(), files.end());
  return files;
}

// "kind/name" of every plugin `zfcore plugins` finds in this build.
std::set<std::string> built_plugins() {
  auto listing = test::run_command(test::zfcore() + " plugins");
  REQUIRE(listing.exit_code == 0);
  std::set<std::string> found;
  std::istringstream lines(listing.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string kind, name;
    words >> kind >> name;
    if (kind == "stage" || kind == "offload" || kind == "optimizer" || kind == "selector") found.insert(kind + "/" + name);
  }
  return found;
}

bool names_plugin(const RunConfig &config, zf_kind kind, const std::string &name) {
  const auto &candidates = config.plugin(kind).candidates;
  return std::find(candidates.begin(), candidates.end(), name) != candidates.end();
}

bool wrote(const RunConfig &config, const std::string &table, const std::string &key) {
  return config.core(table).values().count(key) != 0;
}

void copy_into(const std::string &dir, const std::vector<std::string> &files) {
  fs::create_directories(dir);
  for (const std::string &file : files)
    fs::copy_file(test::source_dir() + "/tests/fixtures/" + file, dir + "/" + fs::path(file).filename().string(),
                  fs::copy_options::overwrite_existing);
}

// Small stand-ins for the models, data and directories the examples name.
struct StandIns {
  std::string dir, llama, qwen2, alpaca, text, nvme;
};

// Made afresh under build/test-scratch/NAME (each case its own: ctest runs them in parallel).
StandIns make_stand_ins(const std::string &name) {
  StandIns s;
  s.dir = test::scratch_dir(name);
  {
    // A Hugging Face directory as `huggingface-cli download` leaves it: config.json, the weights
    // and the tokenizer's files (Llama-2: tokenizer.model; Qwen2: tokenizer.json and its config).
    s.llama = s.dir + "/models/llama";
    copy_into(s.llama, {"hf/llama/config.json", "hf/llama/model.safetensors", "tokenizers/sentencepiece/tokenizer.model"});
    s.qwen2 = s.dir + "/models/qwen2";
    copy_into(s.qwen2, {"hf/qwen2/config.json", "hf/qwen2/model.safetensors", "tokenizers/qwen2_style/tokenizer.json",
                        "tokenizers/qwen2_style/tokenizer_config.json"});
    // alpaca_data.json's format: a JSON array of instruction, input (may be empty), output.
    s.alpaca = s.dir + "/data/alpaca_data.json";
    fs::create_directories(s.dir + "/data");
    std::ofstream(s.alpaca) << R"([
  {"instruction": "Give three tips for staying healthy.", "input": "",
   "output": "1. Eat a balanced diet.\n2. Exercise regularly.\n3. Get enough sleep."},
  {"instruction": "Translate the sentence into French.", "input": "The cat sleeps.", "output": "Le chat dort."},
  {"instruction": "What is the capital of France?", "input": "", "output": "Paris."},
  {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
]
)";
    // Enough text for a few steps of 128-token sequences with a held-out part.
    s.text = s.dir + "/data/corpus.txt";
    std::ofstream text(s.text);
    for (int line = 0; line < 200; ++line) text << "line " << line << " of a small text corpus for the examples test\n";
    s.nvme = s.dir + "/nvme";
    fs::create_directories(s.nvme);
  }
  return s;
}

// The --set overrides that put the stand-ins in place of the paths EXAMPLE names.
std::vector<std::string> stand_in_sets(const std::string &example, const StandIns &s) {
  RunConfig config = RunConfig::load(test::source_dir() + "/" + example);
  std::vector<std::string> sets;
  // The model directory: a tiny checkpoint of the family its tokenizer belongs to.
  const std::string model = config.string("data", "tokenizer") == "hf" || config.string("model", "type") == "qwen2"
                                ? s.qwen2
                                : s.llama;
  if (wrote(config, "model", "init_from")) sets.push_back("model.init_from=" + model);
  if (wrote(config, "data", "tokenizer_path")) sets.push_back("data.tokenizer_path=" + model);
  const std::string data_type = config.string("data", "type");
  if (data_type == "alpaca") sets.push_back("data.path=" + s.alpaca);
  if (data_type == "text" && !fs::exists(config.string("data", "path"))) {
    WARN(example << ": " << config.string("data", "path") << " is not on this machine; validated with a stand-in");
    sets.push_back("data.path=" + s.text);
  }
  for (const ConfigEntry &entry : config.plugin(ZF_KIND_OFFLOAD).entries)
    if (entry.key == "path") sets.push_back("offload.path=" + s.nvme);
  return sets;
}

// A build without the CUDA path (gpu_adam is built only with CUDA) refuses run.device = "cuda":
// a GPU example is checked there as a CPU run, with cpu_adam in gpu_adam's place (a CPU optimizer
// on a GPU run without offload is refused, as it should be), and the host memory of the machines
// these examples are written for (125 GiB per GPU): validate checks the memory plan, and this machine's
// memory says nothing about theirs.
std::vector<std::string> cpu_build_sets(const std::string &example, const std::set<std::string> &plugins) {
  RunConfig config = RunConfig::load(test::source_dir() + "/" + example);
  if (plugins.count("optimizer/gpu_adam") || config.string("run", "device") != "cuda") return {};
  WARN(example << ": this build has no CUDA path; validated with run.device = cpu, run.host_memory_limit_gb = 125"
               << (names_plugin(config, ZF_KIND_OPTIMIZER, "gpu_adam") ? " and optimizer.plugin = cpu_adam" : ""));
  std::vector<std::string> sets = {"run.device=cpu", "run.host_memory_limit_gb=125"};
  if (names_plugin(config, ZF_KIND_OPTIMIZER, "gpu_adam")) sets.push_back("optimizer.plugin=cpu_adam");
  return sets;
}

struct Invocation {
  std::string command;
  test::Outcome outcome;
};

// `zfcore COMMAND EXAMPLE --set ...`, run in the stand-ins' directory.
Invocation zfcore_on(const std::string &command, const std::string &example, const StandIns &s,
                     const std::vector<std::string> &sets) {
  Invocation v;
  v.command = test::zfcore() + " " + command + " " + test::source_dir() + "/" + example;
  for (const std::string &set : sets) v.command += " --set " + set;
  v.outcome = test::run_command("cd " + s.dir + " && " + v.command);
  return v;
}

Invocation validate_example(const std::string &example, const StandIns &s, const std::set<std::string> &plugins) {
  std::vector<std::string> sets = stand_in_sets(example, s);
  for (const std::string &set : cpu_build_sets(example, plugins)) sets.push_back(set);
  return zfcore_on("validate", example, s, sets);
}

// A tiny model of FAMILY (llama or qwen2) that the stand-in tokenizer's ids fit, exported in Hugging
// Face format with that tokenizer's files by a one-step zfcore run (the fixtures' models have a
// 96-token vocabulary, too small to train on tokenized text). Returns its directory.
std::string trainable_model(const StandIns &s, const std::string &family) {
  const bool qwen2 = family == "qwen2";
  const std::string dir = s.dir + "/models/" + family + "-trainable";
  std::ofstream(s.dir + "/" + family + "-export.toml")
      << "[run]\nname = \"export\"\noutput_dir = \"" << s.dir << "/" << family << "-export\"\nprogress = \"off\"\n"
      << "[model]\ntype = \"" << family << "\"\nhidden = 32\nlayers = 2\nheads = 4\nkv_heads = 2\nvocab = 768\n"
      << "max_seq = 256\ntie_embeddings = " << (qwen2 ? "true" : "false") << "\n"
      << "[data]\ntype = \"alpaca\"\npath = \"" << s.alpaca << "\"\ntokenizer = \"" << (qwen2 ? "hf" : "sentencepiece")
      << "\"\ntokenizer_path = \"" << (qwen2 ? s.qwen2 : s.llama) << "\"\nseq_len = 255\n"
      << "[train]\nsteps = 1\nmicro_batch = 1\n[optimizer]\nplugin = \"adamw_ref\"\n[stage]\nplugin = \"zero0\"\n"
      << "[checkpoint]\nexport_hf = \"" << dir << "\"\n";
  auto exported = test::run_command(test::zfcore() + " run " + s.dir + "/" + family + "-export.toml");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  return dir;
}

}  // namespace

TEST_CASE("examples: every example config validates, without a GPU, with small stand-ins for its files",
          "[examples]") {
  std::vector<std::string> examples = example_files();
  REQUIRE(examples.size() >= 8);  // quickstart, linear_stack and the six under examples/gpu
  std::set<std::string> plugins = built_plugins();
  StandIns stand_ins = make_stand_ins("examples_validate");
  int validated = 0;
  for (const std::string &example : examples) {
    Invocation v = validate_example(example, stand_ins, plugins);
    INFO(v.command << "\n" << v.outcome.output);
    CHECK(v.outcome.exit_code == 0);
    CHECK_THAT(v.outcome.output, Catch::Contains(": valid ("));
    ++validated;
  }
  CHECK(validated >= 8);
}

TEST_CASE("examples: every example as written trains two steps here, or validate refuses it with run's message",
          "[examples]") {
  // Only the paths are stand-ins, and the run is short (two steps of two sequences, one evaluation
  // batch, no sample). A GPU example on a build without the CUDA path is refused by both, with the
  // same line; on a CUDA build its steps are the [gpu] tests' (a GPU and minutes).
  StandIns s = make_stand_ins("examples_run");
  int trained = 0;
  for (const std::string &example : example_files()) {
    const std::vector<std::string> sets = stand_in_sets(example, s);
    Invocation valid = zfcore_on("validate", example, s, sets);
    const bool gpu = RunConfig::load(test::source_dir() + "/" + example).string("run", "device") == "cuda";
    if (valid.outcome.exit_code == 0 && gpu) continue;
    std::vector<std::string> run_sets = sets;
    for (const char *quick : {"train.steps=2", "train.micro_batch=2", "train.eval_batches=1", "sample.tokens=0"})
      run_sets.push_back(quick);
    run_sets.push_back("run.output_dir=" + s.dir + "/out-" + fs::path(example).stem().string());
    Invocation run = zfcore_on("run", example, s, run_sets);
    INFO(valid.command << "\n" << valid.outcome.output << "\n" << run.command << "\n" << run.outcome.output);
    if (valid.outcome.exit_code == 0) {
      CHECK(run.outcome.exit_code == 0);
      CHECK_THAT(run.outcome.output, Catch::Contains("zfcore: trained 2 steps"));
      ++trained;
    } else {
      const std::string error = test::line_with(valid.outcome.output, "error: ");
      CHECK(!error.empty());
      CHECK(run.outcome.exit_code == valid.outcome.exit_code);
      CHECK(error == test::line_with(run.outcome.output, "error: "));
    }
  }
  CHECK(trained >= 3);  // quickstart, linear_stack, convergence
}

TEST_CASE("examples: README's Examples section names every example, and every example it names exists",
          "[examples]") {
  std::string readme = test::read_text(test::source_dir() + "/README.md");
  auto section = readme.find("\n## Examples\n");
  REQUIRE(section != std::string::npos);
  auto end = readme.find("\n## ", section + 1);
  std::string listing = readme.substr(section, end == std::string::npos ? std::string::npos : end - section);
  std::vector<std::string> examples = example_files();
  for (const std::string &example : examples) {
    INFO(example << " is not in README.md's Examples section");
    CHECK_THAT(listing, Catch::Contains("`" + example + "`"));
  }
  // Every `examples/....toml` the section names is a file.
  for (size_t at = listing.find("`examples/"); at != std::string::npos; at = listing.find("`examples/", at + 1)) {
    std::string named = listing.substr(at + 1, listing.find('`', at + 1) - at - 1);
    INFO(named << " is named in README.md's Examples section but does not exist");
    CHECK(std::find(examples.begin(), examples.end(), named) != examples.end());
  }
}

TEST_CASE("examples: the Alpaca fine-tune examples train on CPU with a tiny model of their family",
          "[examples]") {
  // Each file as written but for the stand-ins, run.device = "cpu" and a short run: bf16, the
  // stage, the offload, ZenFlow's GPU and CPU halves (a CPU update and a swap in 9 steps), the
  // Alpaca data with the family's tokenizer, a checkpoint and the Hugging Face export.
  std::set<std::string> plugins = built_plugins();
  StandIns s = make_stand_ins("examples_train");
  s.llama = trainable_model(s, "llama");
  s.qwen2 = trainable_model(s, "qwen2");
  int trained = 0;
  for (const std::string &example : example_files()) {
    RunConfig config = RunConfig::load(test::source_dir() + "/" + example);
    if (config.string("data", "type") != "alpaca" || !wrote(config, "model", "init_from")) continue;
    const std::string out = s.dir + "/out-" + fs::path(example).stem().string();
    std::vector<std::string> sets = stand_in_sets(example, s);
    for (const std::string &set : cpu_build_sets(example, plugins)) sets.push_back(set);
    for (const std::string &set : {"run.device=cpu", "data.seq_len=255", "train.steps=9", "train.micro_batch=2",
                                   "checkpoint.every=5"})
      sets.push_back(set);
    sets.push_back("run.output_dir=" + out);
    sets.push_back("checkpoint.export_hf=" + out + "/hf");
    Invocation v = zfcore_on("run", example, s, sets);
    INFO(v.command << "\n" << v.outcome.output);
    CHECK(v.outcome.exit_code == 0);
    CHECK_THAT(v.outcome.output, Catch::Contains("zfcore: trained 9 steps"));
    CHECK(fs::exists(out + "/checkpoints/step-00000005"));
    CHECK(fs::exists(out + "/hf/config.json"));
    CHECK(fs::exists(out + "/hf/model.safetensors"));
    std::string summary = test::read_text(out + "/summary.json");
    if (config.has_table("zenflow")) CHECK(std::atoi(test::json_field(summary, "zenflow_cpu_updates").c_str()) >= 1);
    ++trained;
  }
  CHECK(trained >= 2);  // llama2-7b-zenflow-alpaca, qwen2.5-1.5b-alpaca-cpu-offload
}
