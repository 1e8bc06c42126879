// No crash, no hang: bad inputs and faults end zfcore with a located `error:` line and a non-zero
// exit, never a signal or a wait without end. The corpus in corpus/ (each file's first lines say
// which command to run and what the message must contain) is replayed through the binary; inputs
// that cannot live in git (FIFOs, devices, a shard that shrinks mid-run, ranks given different
// configs, plugin files that crash when loaded) are made here.
#include "data/token_shard.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"
#include "tokenizer/tokenizer.hpp"

#include <ATen/ATen.h>
#include <c10/util/Flags.h>
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

C10_DECLARE_bool(caffe2_use_fatal_for_enforce);

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string corpus() { return test::source_dir() + "/tests/reliability/corpus"; }

// The outcome of a command that must fail cleanly: a non-zero exit that is not a signal (128+N)
// nor the timeout's 124, and an error line.
void require_clean_failure(const test::Outcome &outcome) {
  CHECK(outcome.exit_code != 0);
  CHECK(outcome.exit_code < 124);
  CHECK_THAT(outcome.output, Catch::Contains("error: "));
}

std::string header_field(const std::string &text, const std::string &name) {
  std::string marker = "# " + name + ": ";
  auto at = text.find(marker);
  if (at == std::string::npos) return "";
  at += marker.size();
  return text.substr(at, text.find('\n', at) - at);
}

}  // namespace

TEST_CASE("every input of the corpus fails with a located error, without a signal or a hang", "[reliability]") {
  std::string scratch = test::scratch_dir("reliability-corpus");
  int cases = 0;
  for (const auto &entry : fs::directory_iterator(corpus())) {
    if (entry.path().extension() != ".toml") continue;
    std::string text = test::read_text(entry.path());
    std::string expected = header_field(text, "expect"), command = header_field(text, "command");
    REQUIRE(!expected.empty());
    REQUIRE((command == "validate" || command == "run" || command == "estimate"));
    std::string name = entry.path().filename().string();
    std::string extra = command == "run" ? " --set run.output_dir=" + scratch + "/" + name + " --set run.progress=off" : "";
    auto outcome = test::run_command("cd " + corpus() + " && timeout 60 " + test::zfcore() + " " + command + " " +
                                     name + extra);
    INFO(name << "\n" << outcome.output);
    require_clean_failure(outcome);
    CHECK_THAT(outcome.output, Catch::Contains(expected));
    CHECK(outcome.output.size() < 4000);  // no attacker-sized input echoed back
    ++cases;
  }
  CHECK(cases >= 20);
}

TEST_CASE("a FIFO, a device, a directory or an empty file as an input is refused at once", "[reliability]") {
  std::string dir = test::scratch_dir("reliability-special");
  std::string fifo = dir + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
  auto zfcore = "timeout 30 " + test::zfcore();

  SECTION("as the config") {
    for (const std::string &config : {fifo, std::string("/dev/zero"), dir}) {
      auto outcome = test::run_command(zfcore + " run " + config);
      INFO(config << "\n" << outcome.output);
      require_clean_failure(outcome);
      CHECK_THAT(outcome.output, Catch::Contains(config + ":1:1: cannot read the config file: is a"));
    }
  }
  SECTION("as data.path") {
    auto outcome = test::run_command(zfcore + " run " + quickstart + " --set data.path=" + fifo +
                                     " --set run.output_dir=" + dir + "/out");
    require_clean_failure(outcome);
    CHECK_THAT(outcome.output, Catch::Contains("data.path: cannot read " + fifo + ": is a FIFO"));
  }
  SECTION("as model.safetensors") {
    fs::create_directories(dir + "/model");
    fs::copy_file(test::source_dir() + "/tests/fixtures/hf/llama/config.json", dir + "/model/config.json");
    REQUIRE(mkfifo((dir + "/model/model.safetensors").c_str(), 0600) == 0);
    std::ofstream(dir + "/init.toml") << "[model]\ninit_from = \"" << dir << "/model\"\n"
                                      << "[data]\ntype = \"synthetic\"\nvocab = 96\nseq_len = 16\n"
                                      << "[run]\noutput_dir = \"" << dir << "/out\"\n";
    auto outcome = test::run_command(zfcore + " run " + dir + "/init.toml");
    INFO(outcome.output);
    require_clean_failure(outcome);
    CHECK_THAT(outcome.output, Catch::Contains("model.safetensors: cannot open safetensors file: is a FIFO"));
  }
  SECTION("as a plugin file") {
    fs::create_directories(dir + "/plugins");
    REQUIRE(mkfifo((dir + "/plugins/zf-stage-fifo.so").c_str(), 0600) == 0);
    auto outcome = test::run_command(zfcore + " validate " + quickstart + " --set run.plugin_path=" + dir +
                                     "/plugins --set stage.plugin=fifo");
    require_clean_failure(outcome);
    CHECK_THAT(outcome.output, Catch::Contains("zf-stage-fifo.so) was rejected: cannot be loaded: is a FIFO"));
  }
}

TEST_CASE("a libtorch error is an exception with a message, never an abort", "[reliability]") {
  // Loading libsentencepiece once overwrote libtorch's flag next to a shared FLAGS_minloglevel.
  auto tokenizer = load_sentencepiece_tokenizer(test::source_dir() + "/tests/fixtures/tokenizers/sentencepiece/tokenizer.model");
  CHECK(tokenizer->vocab_size() > 0);
  CHECK_FALSE(FLAGS_caffe2_use_fatal_for_enforce);
  // A petabyte: the CPU allocator's CAFFE_ENFORCE fails.
  CHECK_THROWS_AS(at::empty({int64_t(1) << 50}, at::kByte), c10::Error);
}

TEST_CASE("ranks given different configs all stop, naming the keys that differ", "[reliability][mpi]") {
  std::string dir = test::scratch_dir("reliability-ranks");
  std::string script = dir + "/per_rank.sh";
  std::ofstream(script) << "#!/bin/sh\nexec " << test::zfcore() << " run " << test::source_dir()
                        << "/examples/linear_stack.toml --set run.progress=off --set run.output_dir=" << dir
                        << " --set train.steps=$((10 + 10 * OMPI_COMM_WORLD_RANK))\n";
  fs::permissions(script, fs::perms::owner_all);
  auto outcome = test::run_command("timeout 60 " + test::mpirun(2) + script);
  INFO(outcome.output);
  CHECK(outcome.exit_code != 0);
  CHECK(outcome.exit_code != 124);
  CHECK_THAT(outcome.output, Catch::Contains("the ranks were given different configs"));
  CHECK_THAT(outcome.output, Catch::Contains("rank 1 differs in train.steps: 20 vs 10 on rank 0"));
}

TEST_CASE("checking a config is linear in its number of keys", "[reliability]") {
  std::string dir = test::scratch_dir("reliability-keys");
  std::string config = dir + "/many_keys.toml";
  {
    std::ofstream out(config);
    out << "[stage]\nplugin = \"zero0\"\n";
    for (int i = 0; i < 200000; ++i) out << "key" << i << " = " << i << "\n";
  }
  auto start = std::chrono::steady_clock::now();
  auto outcome = test::run_command("timeout 60 " + test::zfcore() + " validate " + config);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(outcome.output);
  require_clean_failure(outcome);
  CHECK_THAT(outcome.output, Catch::Contains("unknown key 'key0' in [stage]"));
  CHECK(seconds < 15);  // quadratic: minutes
}

TEST_CASE("a token shard that shrinks while training is a located error, not SIGBUS", "[reliability]") {
  std::string dir = test::scratch_dir("reliability-shrink");
  std::string shard = dir + "/tokens.bin";
  std::vector<int64_t> ids(400000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i % 251);
  write_token_shard(shard, ids, 256);
  std::string config = dir + "/train.toml";
  std::ofstream(config) << "[model]\ntype = \"gpt2\"\nhidden = 32\nlayers = 1\nheads = 2\nvocab = 256\nmax_seq = 32\n"
                        << "[data]\ntype = \"tokens\"\npath = \"" << shard << "\"\nseq_len = 32\n"
                        << "[train]\nsteps = 1000000\nmicro_batch = 4\n"
                        << "[run]\nprogress = \"off\"\nthreads = 1\noutput_dir = \"" << dir << "/out\"\n";
  auto outcome = test::run_command(
      "timeout 120 sh -c '" + test::zfcore() + " run " + config + " & pid=$!; i=0; " +
      "while [ ! -s " + dir + "/out/steps.jsonl ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; " +
      "truncate -s 1000 " + shard + "; wait $pid'");
  INFO(outcome.output);
  require_clean_failure(outcome);
  CHECK_THAT(outcome.output, Catch::Contains(shard + ": the token shard shrank from"));
}

TEST_CASE("plugin files that crash when loaded are rejected with their file and reason", "[reliability]") {
  std::string dir = ZF_HOSTILE_PLUGIN_DIR;
  SECTION("in this process: an entry exported as data, a wild descriptor") {
    PluginRegistry registry({dir});
    std::string reason;
    CHECK(registry.load(dir + "/zf-selector-dataentry.so", &reason) == nullptr);
    CHECK_THAT(reason, Catch::Contains("exports zf_plugin_negotiate as data"));
    CHECK(registry.load(dir + "/zf-selector-wild.so", &reason) == nullptr);
    CHECK_THAT(reason, Catch::Contains("pointer to memory that cannot be read"));
  }
  SECTION("a mistyped name loads no other file in this process (the aborting constructor runs only in the child "
          "that tries it for the 'available:' list)") {
    PluginRegistry registry({dir});
    CHECK_THROWS_WITH(registry.find(ZF_KIND_SELECTOR, "abortct"),
                      Catch::Contains("no selector plugin named 'abortct'") && Catch::Contains("did you mean 'abortctor'?") &&
                          Catch::Contains("failed to load"));
  }
  SECTION("zfcore plugins lists them all and keeps going") {
    auto outcome = test::run_command("ZFCORE_PLUGIN_PATH=" + dir + " timeout 60 " + test::zfcore() + " plugins");
    INFO(outcome.output);
    CHECK(outcome.exit_code == 0);
    CHECK_THAT(outcome.output, Catch::Contains("zf-selector-abortctor.so: crashed while being loaded (signal 6"));
    CHECK_THAT(outcome.output, Catch::Contains("zf-selector-dataentry.so: it exports zf_plugin_negotiate as data"));
    CHECK_THAT(outcome.output, Catch::Contains("zf-selector-wild.so: "));
    CHECK_THAT(outcome.output, Catch::Contains("zero0"));
  }
}

TEST_CASE("a huge --set value is excerpted, and its error located at the --set", "[reliability]") {
  std::string dir = test::scratch_dir("reliability-long-set");
  const std::string huge(120000, 'x');
  for (const std::string &key : {"run.name", "model.type", "optimizer.plugin", "checkpoint.resume", "data.tokenizer"}) {
    auto outcome = test::run_command("cd " + dir + " && timeout 60 " + test::zfcore() + " run " + test::source_dir() +
                                     "/examples/linear_stack.toml --set run.progress=off --set " + key + "=" + huge);
    INFO(key << "\n" << outcome.output.substr(0, 2000));
    require_clean_failure(outcome);
    CHECK_THAT(outcome.output, Catch::Contains("error: --set " + key + "=xxxx"));
    CHECK(outcome.output.size() < 4000);
  }
}

TEST_CASE("a stopped rank is found within run.comm_timeout_s, naming the collective", "[reliability][mpi]") {
  std::string dir = test::scratch_dir("reliability-stopped-rank");
  std::string script = dir + "/per_rank.sh";
  // Rank 1 stops itself (SIGSTOP) mid-run, and goes on 30 s later, to find its peer gone.
  std::ofstream(script) << "#!/bin/sh\n"
                        << "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep 3; kill -STOP $$; sleep 30; kill -CONT $$) & fi\n"
                        << "exec " << test::zfcore() << " run " << test::source_dir()
                        << "/examples/linear_stack.toml --set run.progress=off --set model.hidden=64"
                        << " --set train.micro_batch=16 --set train.steps=100000000 --set run.comm_timeout_s=5"
                        << " --set run.output_dir=" << dir << "/out\n";
  fs::permissions(script, fs::perms::owner_all);
  auto start = std::chrono::steady_clock::now();
  auto outcome = test::run_command("timeout 120 " + test::mpirun(2) + script);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(outcome.output.substr(outcome.output.size() > 3000 ? outcome.output.size() - 3000 : 0));
  CHECK(outcome.exit_code != 0);
  CHECK(outcome.exit_code != 124);
  CHECK_THAT(outcome.output, Catch::Contains("on rank 0 did not finish within 5 s (run.comm_timeout_s)"));
  CHECK(seconds < 60);
}
