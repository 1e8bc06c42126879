// Nothing lost, nothing silently wrong: a checkpoint whose bytes changed is found by its checksums
// (resume falls back to the newest whole one, eval and `zfcore checkpoint verify` name the file and
// tensor); a diverged update is never checkpointed; checkpoints are ordered by step number; the
// checkpoint directory is checked before step 1; a failed export leaves the model in a checkpoint; a
// finished run has a final checkpoint and is not trained again; one run per output directory; the
// step logs hold whole lines only; a checkpoint of another optimizer is refused.
#include "checkpoint/checkpoint.hpp"
#include "comm/communicator.hpp"
#include "engine/checkpoint_files.hpp"
#include "support/process.hpp"

#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string linear_stack() { return test::source_dir() + "/examples/linear_stack.toml"; }

// linear_stack, small and fast, a constant learning rate (a run of N steps is the first N of a longer one).
const std::string kSmall = " --set run.progress=off --set model.hidden=64 --set train.micro_batch=16 ";

// `zfcore run` of the small linear_stack for `steps` steps into `dir`, with `extra` overrides, after
// `launch` (mpirun, a ulimit).
test::Outcome run_small(const std::string &dir, int steps, const std::string &extra = "",
                        const std::string &launch = "") {
  return test::run_command(launch + test::zfcore() + " run " + linear_stack() + kSmall + extra +
                           " --set train.steps=" + std::to_string(steps) + " --set run.output_dir=" + dir);
}

// A tiny GPT on a text file with a held-out file, for the runs `zfcore eval` reads too.
std::string tiny_gpt(const std::string &data_dir) {
  {
    std::ofstream train(data_dir + "/train.txt"), held_out(data_dir + "/held_out.txt");
    for (int i = 0; i < 60; ++i) train << "Line " << i << ": the quick brown fox jumps over " << i % 13 << " dogs.\n";
    for (int i = 0; i < 20; ++i) held_out << "Line " << i << ": a lazy dog sleeps under " << i % 7 << " trees.\n";
  }
  return test::source_dir() + "/examples/quickstart.toml --set run.progress=off --set model.hidden=32" +
         " --set model.layers=2 --set model.heads=2 --set model.max_seq=32 --set data.seq_len=32" +
         " --set data.path=" + data_dir + "/train.txt --set data.eval_fraction=0 --set data.eval_path=" + data_dir +
         "/held_out.txt --set train.micro_batch=4 --set train.eval_every=0 --set train.eval_batches=2" +
         " --set train.lr_schedule=constant --set train.warmup_steps=0 --set sample.tokens=0 ";
}

std::string digest(const std::string &output_dir) {
  return test::json_field(test::read_text(output_dir + "/summary.json"), "param_digest");
}

int count_lines(const std::string &path) {
  std::string text = test::read_text(path);
  return int(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("a damaged checkpoint is found by its checksums: resume falls back to the newest whole one, eval and "
          "verify name it", "[checkpoint]") {
  std::string config = tiny_gpt(test::scratch_dir("safety_checksum_data"));
  std::string dir = test::scratch_dir("safety_checksum");
  auto a = test::run_command(test::zfcore() + " run " + config + "--set train.steps=6 --set checkpoint.every=2" +
                             " --set run.output_dir=" + dir);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const std::string newest = dir + "/checkpoints/step-00000006";
  test::flip_tensor_bytes(newest + "/rank-00000.safetensors", "master");

  auto verify = test::run_command(test::zfcore() + " checkpoint verify " + dir);
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK_THAT(verify.output, Catch::Contains(newest + ": damaged: " + newest +
                                            "/rank-00000.safetensors: tensor 'master' does not match its checksum"));
  CHECK_THAT(verify.output, Catch::Contains("step-00000004: ok") && Catch::Contains("2 checkpoint(s), 1 damaged"));

  // Named by hand, it is refused by eval and run alike.
  for (const char *command : {" eval ", " run "}) {
    auto named = test::run_command(test::zfcore() + command + config + "--set run.output_dir=" + dir +
                                   " --set checkpoint.resume=" + newest);
    INFO(named.output);
    CHECK(named.exit_code == 1);
    CHECK_THAT(named.output, Catch::Contains("is damaged: " + newest + "/rank-00000.safetensors: tensor 'master'"));
  }

  // resume = auto: said, moved aside, and the run continues from step 4 to the uninterrupted run's weights.
  auto resumed = test::run_command(test::zfcore() + " run " + config + "--set train.steps=8 --set checkpoint.every=2" +
                                   " --set run.output_dir=" + dir);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("checkpoint " + newest + " is damaged (") &&
                                 Catch::Contains("moved to " + newest + ".damaged"));
  CHECK_THAT(resumed.output, Catch::Contains("resumed from " + dir + "/checkpoints/step-00000004 (step 4)"));
  CHECK(fs::exists(newest + ".damaged/rank-00000.safetensors"));
  std::string straight = test::scratch_dir("safety_checksum_straight");
  auto b = test::run_command(test::zfcore() + " run " + config + "--set train.steps=8 --set run.output_dir=" + straight);
  REQUIRE(b.exit_code == 0);
  CHECK(digest(dir) == digest(straight));
}

TEST_CASE("checkpoints are ordered by step number, and a save never prunes the checkpoint it wrote", "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_order");
  auto comm = make_cpu_communicator();
  CheckpointStore store(dir, 1, *comm);
  TrainingState state;
  state.layout_digest = "test";
  state.master = at::arange(8, at::kFloat);
  state.shard_end = 8;
  state.rng = at::zeros({4}, at::kByte);
  for (int64_t step : {99999999, 100000000}) {
    state.step = step;
    store.save(state, "{}");
  }
  std::vector<fs::path> left = checkpoints_in(dir);
  REQUIRE(left.size() == 1);
  CHECK(left[0].filename() == "step-100000000");  // as text, step-99999999 sorts after it
  CHECK(store.newest_whole("", "", "", false) == left[0]);
  // A run resumed from an earlier step finds newer checkpoints of the run before it: what it saves stays.
  state.step = 5;
  store.save(state, "{}");
  CHECK(fs::exists(dir + "/step-00000005/rank-00000.safetensors"));
}

TEST_CASE("a diverging run stops at the step whose update went non-finite, and never checkpoints it",
          "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_diverge");
  auto run = run_small(dir, 50, "--set optimizer.lr=1e5 --set checkpoint.every=1 --set checkpoint.keep=2");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("step 3: the training diverged: ") &&
                             Catch::Contains("is not finite after the update") &&
                             Catch::Contains("the newest checkpoint is " + dir + "/checkpoints/step-"));
  // Every checkpoint left holds finite weights: each one resumes.
  std::vector<fs::path> left = checkpoints_in(dir + "/checkpoints");
  REQUIRE(!left.empty());
  for (const fs::path &checkpoint : left) {
    at::Tensor master = SafetensorsFile::open((checkpoint / "rank-00000.safetensors").string()).load("master");
    CHECK(master.isfinite().all().item<bool>());
  }
}

TEST_CASE("an unusable checkpoint.dir is an error before step 1", "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_ckpt_dir");
  auto run = run_small(dir, 3, "--set checkpoint.dir=/dev/null/checkpoints");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("checkpoint.dir = \"/dev/null/checkpoints\": cannot write there"));
  CHECK_FALSE(fs::exists(dir + "/steps.jsonl"));
}

TEST_CASE("a finished run has a final checkpoint: eval reads it, running it again trains nothing, and a failed "
          "export loses nothing", "[checkpoint]") {
  std::string config = tiny_gpt(test::scratch_dir("safety_final_data"));
  std::string dir = test::scratch_dir("safety_final"), exported = test::scratch_dir("safety_final_export");
  // A directory where the export's weights go makes it fail (zfcore replaces only files); no
  // checkpoint.final: the model goes into a checkpoint.
  fs::create_directories(exported + "/model.safetensors/in-the-way");
  std::ofstream(exported + "/.zfcore-export") << "model.safetensors\n";  // an earlier export's directory (its record)
  auto a = test::run_command(test::zfcore() + " run " + config + "--set train.steps=3 --set checkpoint.final=false" +
                             " --set checkpoint.export_hf=" + exported + " --set run.output_dir=" + dir);
  INFO(a.output);
  CHECK(a.exit_code == 1);
  const std::string final_checkpoint = dir + "/checkpoints/step-00000003";
  CHECK_THAT(a.output, Catch::Contains("the export to " + exported + " failed") &&
                           Catch::Contains("The trained model is in the checkpoint " + final_checkpoint));
  CHECK(fs::exists(final_checkpoint + "/rank-00000.safetensors"));
  for (const auto &entry : fs::directory_iterator(exported))  // no temporary left
    CHECK(entry.path().filename().string().find(".zf-") == std::string::npos);
  fs::remove_all(exported + "/model.safetensors");

  // Run again: complete, nothing trained, the reports kept; the export is made from the checkpoint.
  const std::string steps_before = test::read_text(dir + "/steps.jsonl"), summary = test::read_text(dir + "/summary.json");
  auto again = test::run_command(test::zfcore() + " run " + config + "--set train.steps=3 --set checkpoint.export_hf=" +
                                 exported + " --set run.output_dir=" + dir);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("the run is complete: " + final_checkpoint + " is at step 3") &&
                               Catch::Contains("exported the model"));
  CHECK(test::read_text(dir + "/steps.jsonl") == steps_before);
  CHECK(test::read_text(dir + "/summary.json") == summary);
  CHECK(fs::exists(exported + "/model.safetensors"));

  // By default a run ends with a checkpoint, and eval reads it (not init_from's weights).
  std::string second = test::scratch_dir("safety_final_default");
  auto b = test::run_command(test::zfcore() + " run " + config + "--set train.steps=3 --set run.output_dir=" + second);
  REQUIRE(b.exit_code == 0);
  CHECK(fs::exists(second + "/checkpoints/step-00000003/checkpoint.json"));
  auto eval = test::run_command(test::zfcore() + " eval " + config + "--set run.output_dir=" + second);
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains("from checkpoint " + second + "/checkpoints/step-00000003 (step 3)"));
}

TEST_CASE("a second run on an output directory in use stops at once, naming the first", "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_lock");
  pid_t first = fork();
  REQUIRE(first >= 0);
  if (first == 0) {
    std::string log = dir + "/first.log", output = "run.output_dir=" + dir;
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    execl(test::zfcore().c_str(), "zfcore", "run", linear_stack().c_str(), "--set", "train.steps=1000000", "--set",
          output.c_str(), "--set", "run.progress=off", nullptr);
    _exit(127);
  }
  for (int i = 0; i < 600 && count_lines(dir + "/steps.jsonl") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = run_small(dir, 5);
  kill(first, SIGTERM);
  int status = 0;
  waitpid(first, &status, 0);
  INFO(second.output << "\n" << test::read_text(dir + "/first.log"));
  CHECK(second.exit_code == 1);
  CHECK_THAT(second.output, Catch::Contains("run.output_dir = \"" + dir + "\" is in use by pid " +
                                            std::to_string(first) + " on "));
  // The first run was not disturbed: it saved at the signal, and its log has only its own steps.
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);
  CHECK_THAT(test::read_text(dir + "/first.log"), !Catch::Contains("error"));
}

TEST_CASE("the step logs hold whole lines on a full disk, and a resume cuts a partial last line", "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_lines");
  // Files may not grow past 6 KiB: steps.jsonl reaches it mid-line.
  auto run = run_small(dir, 30, "--set checkpoint.final=false", "ulimit -f 12 && ");
  INFO(run.output);
  CHECK_THAT(run.output, Catch::Contains("cannot write " + dir + "/steps.jsonl"));
  std::string jsonl = test::read_text(dir + "/steps.jsonl");
  REQUIRE(!jsonl.empty());
  CHECK(jsonl.back() == '\n');
  CHECK(fs::file_size(dir + "/steps.jsonl") < 6144);

  // A log an older zfcore cut mid-line: the resume drops the partial line before appending.
  std::string resumed = test::scratch_dir("safety_lines_resume");
  REQUIRE(run_small(resumed, 4).exit_code == 0);
  std::ofstream(resumed + "/steps.jsonl", std::ios::app) << "{\"step\":5,\"loss\":0.12";
  auto more = run_small(resumed, 6);
  INFO(more.output);
  REQUIRE(more.exit_code == 0);
  std::ifstream lines(resumed + "/steps.jsonl");
  std::string line;
  int step = 0;
  while (std::getline(lines, line)) {
    INFO(line);
    CHECK(line.back() == '}');
    CHECK(test::json_field(line, "step") == std::to_string(++step));
  }
  CHECK(step == 6);
}

TEST_CASE("a checkpoint of another optimizer's state is refused, naming both", "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_optimizer");
  REQUIRE(run_small(dir, 2, "--set optimizer.plugin=cpu_adam").exit_code == 0);
  auto lion = run_small(dir, 4, "--set optimizer.plugin=cpu_lion");
  INFO(lion.output);
  CHECK(lion.exit_code == 1);
  CHECK_THAT(lion.output, Catch::Contains("was written with optimizer.plugin = \"cpu_adam\" (state exp_avg, "
                                          "exp_avg_sq); this run uses \"cpu_lion\" (state exp_avg), whose state is "
                                          "not the same"));
  // The same AdamW state under another plugin continues.
  auto reference = run_small(dir, 4, "--set optimizer.plugin=adamw_ref");
  INFO(reference.output);
  CHECK(reference.exit_code == 0);
  CHECK_THAT(reference.output, Catch::Contains("(step 2)"));
}

TEST_CASE("under 2 ranks a damaged rank file is found by the rank that checks it, and every rank falls back",
          "[checkpoint][mpi]") {
  const std::string zero2 = "--set stage.plugin=zero2 --set checkpoint.every=2", mpirun = "timeout 300 " + test::mpirun(2);
  std::string dir = test::scratch_dir("safety_ranks");
  auto a = run_small(dir, 4, zero2, mpirun);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  // run.comm_timeout_s = 0: once three steps are timed, a lost rank is found in a minute, not ten.
  CHECK_THAT(a.output, Catch::Contains("during the steps a collective waits at most 60 s for its peers"));
  const std::string damaged = dir + "/checkpoints/step-00000004/rank-00001.safetensors";
  test::flip_tensor_bytes(damaged, "optimizer.exp_avg");
  auto resumed = run_small(dir, 6, zero2, mpirun);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains(damaged + ": tensor 'optimizer.exp_avg' does not match its checksum"));
  CHECK_THAT(resumed.output, Catch::Contains("resumed from " + dir + "/checkpoints/step-00000002 (step 2)"));
  std::string straight = test::scratch_dir("safety_ranks_straight");
  REQUIRE(run_small(straight, 6, zero2, mpirun).exit_code == 0);
  CHECK(digest(dir) == digest(straight));
}

TEST_CASE("a checkpoint whose weights are not finite (its checksums intact) is refused on resume, naming the weight",
          "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_nan_checkpoint");
  REQUIRE(run_small(dir, 2).exit_code == 0);
  // Rewritten as a buggy writer would have: a NaN in the master, checksums of the bytes as written.
  const std::string file = dir + "/checkpoints/step-00000002/rank-00000.safetensors";
  test::rewrite_tensor(file, "master", [](at::Tensor &master) { master[5] = NAN; });
  auto resumed = run_small(dir, 4);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 1);
  CHECK_THAT(resumed.output, Catch::Contains("step-00000002: the saved weight 'linears.0.weight' element 5 = nan "
                                             "(rank 0) is not finite"));
}

TEST_CASE("a checkpoint whose header was edited by hand (a tensor's dtype, its checksums removed) is found damaged",
          "[checkpoint]") {
  std::string dir = test::scratch_dir("safety_header_edit");
  REQUIRE(run_small(dir, 2).exit_code == 0);
  const std::string step = dir + "/checkpoints/step-00000002", file = step + "/rank-00000.safetensors";
  std::string saved;
  {
    std::ifstream in(file, std::ios::binary);
    saved.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto restore = [&] { std::ofstream(file, std::ios::binary | std::ios::trunc) << saved; };
  auto expect_damaged = [&](const std::string &why) {
    auto verify = test::run_command(test::zfcore() + " checkpoint verify " + step);
    INFO(verify.output);
    CHECK(verify.exit_code == 1);
    CHECK_THAT(verify.output, Catch::Contains(step + ": damaged: ") && Catch::Contains(why));
    auto resumed = run_small(dir, 4, "--set checkpoint.resume=" + step);
    INFO(resumed.output);
    CHECK(resumed.exit_code == 1);
    CHECK_THAT(resumed.output, Catch::Contains("is damaged") && Catch::Contains(why));
    restore();
  };
  auto erase_metadata = [](nlohmann::json &header, const std::string &prefix) {
    nlohmann::json &metadata = header["__metadata__"];
    for (auto it = metadata.begin(); it != metadata.end();)
      it = it.key().rfind(prefix, 0) == 0 ? metadata.erase(it) : std::next(it);
  };

  // The master's float32 bytes read as int32: the same bytes, so the tensors' own checksums match.
  test::edit_header(file, [](nlohmann::json &header) { header["master"]["dtype"] = "I32"; });
  expect_damaged("the tensors' entries in the header (dtype, shape, data offsets) do not match the checksum");
  // Every tensor's checksum removed, as if an older zfcore had written the file.
  test::edit_header(file, [&](nlohmann::json &header) { erase_metadata(header, "checksum."); });
  expect_damaged("the tensors' checksums that every checkpoint of this format records are missing");
  // The entries' checksum removed, then the dtype edited: the metadata says there was one.
  test::edit_header(file, [&](nlohmann::json &header) {
    erase_metadata(header, "checksum_entries");
    header["master"]["dtype"] = "I32";
  });
  expect_damaged("the header entries' checksums that every checkpoint of this format records are missing");

  // A format field of 1, which format 1's files never had.
  test::edit_header(file, [](nlohmann::json &header) { header["__metadata__"]["format"] = "1"; });
  expect_damaged("metadata field 'format' = \"1\": this zfcore writes format 2 and reads it and format 1 (whose "
                 "files have no format field); the field was edited");

  auto verify = test::run_command(test::zfcore() + " checkpoint verify " + step);  // restored: whole again
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
}
