// Checkpoints: resuming from step k gives bit-for-bit the run that never stopped; SIGTERM saves
// and stops; an unfinished save (a .tmp directory), an interrupted prune and a damaged file are
// handled; the schedule is a pure function of the step.
#include "checkpoint/safetensors.hpp"
#include "engine/checkpoint_files.hpp"
#include "engine/schedule.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

using namespace zf;
namespace fs = std::filesystem;

namespace {

const std::string kTraining =
    " --set run.progress=off --set model.hidden=128 --set train.steps=30 --set train.micro_batch=32"
    " --set train.lr_schedule=cosine --set train.warmup_steps=5 --set train.clip_grad_norm=1.0"
    " --set checkpoint.keep=5 ";

std::string linear_stack() { return test::source_dir() + "/examples/linear_stack.toml"; }

// step -> the loss line of steps.jsonl, as text (bit-exact comparison).
std::map<int, std::string> losses(const std::string &dir) {
  std::map<int, std::string> out;
  std::ifstream in(dir + "/steps.jsonl");
  std::string line;
  while (std::getline(in, line))
    out[std::stoi(test::json_field(line, "step"))] = test::json_field(line, "loss");
  return out;
}

}  // namespace

TEST_CASE("resuming from a checkpoint reproduces the uninterrupted run bit for bit", "[checkpoint]") {
  std::string full = test::scratch_dir("ckpt_full");
  auto a = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining + "--set checkpoint.every=10 " +
                             "--set run.output_dir=" + full);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  for (const char *step : {"step-00000010", "step-00000020", "step-00000030"})
    REQUIRE(fs::exists(full + "/checkpoints/" + step + "/rank-00000.safetensors"));

  std::string resumed = test::scratch_dir("ckpt_resumed");
  auto b = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining + "--set run.output_dir=" + resumed +
                             " --set checkpoint.resume=" + full + "/checkpoints/step-00000010");
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  CHECK_THAT(b.output, Catch::Contains("resumed from") && Catch::Contains("(step 10)"));
  std::string summary_a = test::read_text(full + "/summary.json"), summary_b = test::read_text(resumed + "/summary.json");
  CHECK(test::json_field(summary_b, "first_step") == "11");
  CHECK(test::json_field(summary_b, "param_digest") == test::json_field(summary_a, "param_digest"));
  auto loss_a = losses(full), loss_b = losses(resumed);
  REQUIRE(loss_b.size() == 20);
  for (int step = 11; step <= 30; ++step) {
    INFO("step " << step);
    CHECK(loss_b[step] == loss_a[step]);
  }
  // A fresh run from scratch in the same place continues too (resume = "auto").
  auto c = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining + "--set run.output_dir=" + full);
  CHECK_THAT(c.output, Catch::Contains("(step 30)"));
  // Resuming in the same place from an earlier checkpoint: the reports hold each step once, the
  // rows written after that checkpoint replaced by the resumed run's.
  auto d = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining + "--set run.output_dir=" + full +
                             " --set checkpoint.every=0 --set checkpoint.resume=" + full + "/checkpoints/step-00000010");
  INFO(d.output);
  REQUIRE(d.exit_code == 0);
  std::string jsonl = test::read_text(full + "/steps.jsonl"), csv = test::read_text(full + "/steps.csv");
  CHECK(std::count(jsonl.begin(), jsonl.end(), '\n') == 30);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 31);  // the header and 30 steps
  CHECK(losses(full) == loss_a);
}

TEST_CASE("an unfinished save is ignored and a damaged checkpoint is a clear error", "[checkpoint]") {
  std::string dir = test::scratch_dir("ckpt_damaged");
  auto a = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining +
                             "--set train.steps=10 --set checkpoint.every=5 --set run.output_dir=" + dir);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  // A crash in the middle of saving step 15 leaves only its .tmp directory behind.
  fs::create_directories(dir + "/checkpoints/step-00000015.tmp");
  std::ofstream(dir + "/checkpoints/step-00000015.tmp/rank-00000.safetensors") << "half a file";
  auto resumed = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining +
                                   "--set train.steps=12 --set run.output_dir=" + dir);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("step-00000010 (step 10)"));

  // Truncate the newest checkpoint's file: resuming names the file and does not crash.
  std::string file = dir + "/checkpoints/step-00000010/rank-00000.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  auto damaged = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining +
                                   "--set train.steps=12 --set checkpoint.resume=" + dir + "/checkpoints/step-00000010" +
                                   " --set run.output_dir=" + test::scratch_dir("ckpt_damaged_out"));
  INFO(damaged.output);
  CHECK(damaged.exit_code == 1);
  CHECK_THAT(damaged.output, Catch::Contains("rank-00000.safetensors"));

  // Another model cannot resume from it.
  auto other = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining +
                                 "--set model.hidden=64 --set checkpoint.resume=" + dir + "/checkpoints/step-00000005" +
                                 " --set run.output_dir=" + test::scratch_dir("ckpt_other"));
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Catch::Contains("model.hidden = 128 in the checkpoint, 64 in this config"));
}

TEST_CASE("what an interrupted save or prune of the run left is removed (only that), and a damaged RNG state is a "
          "clear error", "[checkpoint]") {
  std::string dir = test::scratch_dir("ckpt_leftovers");
  const std::string command = test::zfcore() + " run " + linear_stack() + kTraining +
                              "--set checkpoint.every=2 --set checkpoint.keep=1 --set run.output_dir=" + dir;
  auto first = test::run_command(command + " --set train.steps=2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // What its saves create carries the run's id, in the name and in the ownership marker: a kill while
  // pruning (step 1, renamed out of the store) and while saving (step 7's .tmp). Beside them a
  // directory the run did not create.
  const std::string id = test::json_field(test::read_text(dir + "/checkpoints/step-00000002/checkpoint.json"), "run_id");
  REQUIRE(id.size() == 16);
  for (std::string leftover : {"step-00000001." + id + ".deleting", std::string("step-00000003"),
                               "step-00000007." + id + ".tmp"}) {
    fs::create_directories(dir + "/checkpoints/" + leftover);
    std::ofstream(dir + "/checkpoints/" + leftover + "/rank-00000.safetensors") << "left over";
    if (leftover != "step-00000003") std::ofstream(dir + "/checkpoints/" + leftover + "/.zfcore-owner") << id << "\n";
  }
  auto run = test::run_command(command + " --set train.steps=4");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::vector<std::string> left;
  for (const auto &entry : fs::directory_iterator(dir + "/checkpoints")) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"step-00000003", "step-00000004"});  // keep = 1: step 2 pruned too

  // The saved CPU generator state zeroed (the file rewritten, its checksums matching): torch refuses
  // it; the message names the checkpoint.
  std::string file = dir + "/checkpoints/step-00000004/rank-00000.safetensors";
  test::rewrite_tensor(file, "rng", [](at::Tensor &rng) { rng.zero_(); });
  auto damaged = test::run_command(test::zfcore() + " run " + linear_stack() + kTraining +
                                   "--set train.steps=6 --set run.output_dir=" + dir);
  INFO(damaged.output);
  CHECK(damaged.exit_code == 1);
  CHECK_THAT(damaged.output, Catch::Contains("step-00000004: the saved random generator state") &&
                                 Catch::Contains("resume from an earlier one"));
}

TEST_CASE("SIGTERM and SIGHUP save a checkpoint at the end of the current step and stop", "[checkpoint]") {
  for (int signal : {SIGTERM, SIGHUP}) {
    INFO("signal " << signal);
    std::string dir = test::scratch_dir("ckpt_signal_" + std::to_string(signal));
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      std::string log = dir + "/log.txt";
      freopen(log.c_str(), "a", stdout);  // both appending: neither overwrites the other's lines
      freopen(log.c_str(), "a", stderr);
      std::string output = "run.output_dir=" + dir;
      execl(test::zfcore().c_str(), "zfcore", "run", linear_stack().c_str(), "--set", "train.steps=1000000", "--set",
            output.c_str(), "--set", "run.progress=off", nullptr);
      _exit(127);
    }
    // Wait until a few steps are done, then ask it to stop.
    for (int i = 0; i < 600 && losses(dir).size() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(losses(dir).size() >= 3);
    kill(child, signal);
    int status = 0;
    waitpid(child, &status, 0);
    INFO(test::read_text(dir + "/log.txt"));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + signal);
    int last = losses(dir).rbegin()->first;
    CHECK(fs::exists(dir + "/checkpoints/" + std::string("step-") + std::string(8 - std::to_string(last).size(), '0') +
                     std::to_string(last) + "/rank-00000.safetensors"));
    CHECK(test::json_field(test::read_text(dir + "/summary.json"), "stop_signal") == std::to_string(signal));
    // Answered at once, so that nobody asks twice (mpirun ends the ranks on a second Ctrl-C).
    CHECK_THAT(test::read_text(dir + "/log.txt"), Catch::Contains("zfcore: stop requested: a checkpoint is written"));
  }
}

TEST_CASE("SIGTERM while the final sample is written ends it at once", "[checkpoint]") {
  std::string dir = test::scratch_dir("ckpt_signal_sample");
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::string log = dir + "/log.txt", output = "run.output_dir=" + dir;
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
    execl(test::zfcore().c_str(), "zfcore", "run", quickstart.c_str(), "--set", "train.steps=3", "--set",
          "sample.tokens=10000000", "--set", output.c_str(), "--set", "run.progress=off", nullptr);
    _exit(127);
  }
  // summary.json is written when training ends, before the sample.
  for (int i = 0; i < 1200 && !fs::exists(dir + "/summary.json"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(fs::exists(dir + "/summary.json"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(child, SIGTERM);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 200 && done == 0; ++i) {  // 10 s; 10 million tokens would take hours
    done = waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  INFO(test::read_text(dir + "/log.txt"));
  REQUIRE(done == child);
  CHECK(WIFEXITED(status));
  CHECK_THAT(test::read_text(dir + "/log.txt"), Catch::Contains("zfcore: sample cut short by signal 15"));
}

TEST_CASE("an output file that cannot be written is a warning: training, checkpoints and the export go on",
          "[checkpoint]") {
  // steps.jsonl on a full disk, made by a file size limit (zfcore writes no link, so /dev/full cannot
  // stand in): one warning, the run goes on; the log ends with whole lines. SIGXFSZ is ignored, as a
  // full disk sends no signal. The limit is far above summary.json, and no checkpoint is written.
  std::string dir = test::scratch_dir("ckpt_full_log");
  auto run = test::run_command("sh -c \"trap '' XFSZ; ulimit -f 16; exec " + test::zfcore() + " run " + linear_stack() +
                               kTraining + "--set train.steps=40 --set checkpoint.final=false --set run.output_dir=" +
                               dir + "\"");
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("cannot write " + dir + "/steps.jsonl") && Catch::Contains("training goes on"));
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "steps") == "40");
  const std::string log = test::read_text(dir + "/steps.jsonl");
  CHECK(!log.empty());
  CHECK(log.back() == '\n');

  // summary.json that cannot be replaced (a directory of that name is in the way): the Hugging Face
  // export (elsewhere) is still written, then the run fails with what it could not write; what was
  // there is left as it was.
  std::string out = test::scratch_dir("ckpt_full_summary"), exported = test::scratch_dir("ckpt_full_export");
  fs::create_directories(out + "/summary.json");
  std::ofstream(out + "/summary.json/notes") << "mine\n";
  auto end = test::run_command(test::zfcore() + " run " + test::source_dir() + "/examples/quickstart.toml" +
                               " --set train.steps=3 --set sample.tokens=0 --set run.progress=off --set run.output_dir=" +
                               out + " --set checkpoint.export_hf=" + exported + "/hf");
  INFO(end.output);
  CHECK(end.exit_code == 1);
  CHECK_THAT(end.output, Catch::Contains("cannot write " + out + "/summary.json"));
  CHECK(fs::exists(exported + "/hf/model.safetensors"));
  CHECK(test::read_text(out + "/summary.json/notes") == "mine\n");
}

TEST_CASE("learning-rate schedules: warm-up, then constant, cosine or linear decay", "[checkpoint]") {
  LrSchedule schedule{"cosine", 10, 110, 0.1};
  CHECK(schedule.factor(1) == Approx(0.1));
  CHECK(schedule.factor(10) == Approx(1.0));
  CHECK(schedule.factor(60) == Approx(0.1 + 0.9 * 0.5));
  CHECK(schedule.factor(110) == Approx(0.1));
  schedule.kind = "linear";
  CHECK(schedule.factor(35) == Approx(0.1 + 0.9 * 0.75));
  schedule.kind = "constant";
  CHECK(schedule.factor(100) == 1.0);
}

// A transformer on text, two ranks, dropout on: resuming mid-epoch needs the data position and the
// RNG state of every rank, and the run crosses an epoch boundary after the resume. The export at
// the end, loaded through model.init_from and stepped once at lr = 0, gives the same digest.
TEST_CASE("a GPT on text under 2 ranks resumes mid-epoch bit for bit, and its export seeds a new run", "[checkpoint][mpi]") {
  std::string data_dir = test::scratch_dir("ckpt_text_data");
  {
    std::ofstream text(data_dir + "/corpus.txt");
    for (int i = 0; i < 60; ++i) text << "Line " << i << ": the quick brown fox jumps over " << i * 7 % 13 << " lazy dogs.\n";
  }
  std::string common = " run " + test::source_dir() + "/examples/quickstart.toml --set run.progress=off" +
                       " --set model.hidden=32 --set model.layers=2 --set model.heads=2 --set model.max_seq=32" +
                       " --set model.dropout=0.1 --set data.seq_len=32 --set data.path=" + data_dir + "/corpus.txt" +
                       " --set train.micro_batch=4 --set train.steps=16 --set train.warmup_steps=2" +
                       " --set train.eval_every=8 --set sample.tokens=0 ";
  std::string full = test::scratch_dir("ckpt_text_full");
  auto a = test::run_command("timeout 300 " + test::mpirun(2) + test::zfcore() + common + "--set checkpoint.every=5" +
                             " --set checkpoint.keep=4 --set run.output_dir=" + full +
                             " --set checkpoint.export_hf=" + full + "/hf");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.output, Catch::Contains("sequences of 32") && Catch::Contains("exported the model"));

  std::string resumed = test::scratch_dir("ckpt_text_resumed");
  auto b = test::run_command("timeout 300 " + test::mpirun(2) + test::zfcore() + common + "--set run.output_dir=" +
                             resumed + " --set checkpoint.resume=" + full + "/checkpoints/step-00000005");
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  auto loss_a = losses(full), loss_b = losses(resumed);
  REQUIRE(loss_b.size() == 11);
  for (int step = 6; step <= 16; ++step) {
    INFO("step " << step);
    CHECK(loss_b[step] == loss_a[step]);
  }
  std::string summary_a = test::read_text(full + "/summary.json");
  CHECK(test::json_field(test::read_text(resumed + "/summary.json"), "param_digest") ==
        test::json_field(summary_a, "param_digest"));

  std::string seeded = test::scratch_dir("ckpt_text_seeded");
  auto c = test::run_command("timeout 300 " + test::zfcore() + common + "--set model.init_from=" + full + "/hf" +
                             " --set train.steps=1 --set optimizer.lr=0 --set run.output_dir=" + seeded);
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(test::json_field(test::read_text(seeded + "/summary.json"), "param_digest") ==
        test::json_field(summary_a, "param_digest"));
}

TEST_CASE("a GPT on packed instruction data resumes bit for bit", "[checkpoint][packing]") {
  std::string data_dir = test::scratch_dir("ckpt_packed_data");
  {
    std::ofstream json(data_dir + "/alpaca.json");
    json << "[";
    for (int i = 0; i < 40; ++i)
      json << (i ? ",\n" : "") << "{\"instruction\": \"Count to " << i % 9 << ".\", \"output\": \""
           << std::string(size_t(1 + i * 7 % 60), char('a' + i % 26)) << "\"}";
    json << "]";
  }
  std::string common = " run " + test::source_dir() + "/examples/quickstart.toml --set run.progress=off" +
                       " --set model.hidden=32 --set model.layers=2 --set model.heads=2 --set model.max_seq=512" +
                       " --set data.type=alpaca --set data.packing=true --set data.seq_len=512 --set data.path=" +
                       data_dir + "/alpaca.json --set train.micro_batch=2 --set train.steps=8 --set train.warmup_steps=2" +
                       " --set train.eval_every=4 --set sample.tokens=0 ";
  std::string full = test::scratch_dir("ckpt_packed_full");
  auto a = test::run_command("timeout 300 " + test::zfcore() + common + "--set checkpoint.every=4 --set run.output_dir=" + full);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.output, Catch::Contains("40 documents packed into") && Catch::Contains("of the positions hold tokens"));
  std::string resumed = test::scratch_dir("ckpt_packed_resumed");
  auto b = test::run_command("timeout 300 " + test::zfcore() + common + "--set run.output_dir=" + resumed +
                             " --set checkpoint.resume=" + full + "/checkpoints/step-00000004");
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  auto loss_a = losses(full), loss_b = losses(resumed);
  REQUIRE(loss_b.size() == 4);
  for (int step = 5; step <= 8; ++step) {
    INFO("step " << step);
    CHECK(loss_b[step] == loss_a[step]);
  }
  CHECK(test::json_field(test::read_text(resumed + "/summary.json"), "param_digest") ==
        test::json_field(test::read_text(full + "/summary.json"), "param_digest"));
}
