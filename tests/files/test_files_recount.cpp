// Nothing lost, part 3, the recount: variants of the red-team's root causes that main still missed.
// Every rank writes under the directories it opened at the start (root cause 4 under mpirun);
// `zfcore validate` checks the memory plan a run checks, and a GPU run's plan counts its activations
// (root cause 8).
#include "files/tiny_run.hpp"
#include "memory/config_estimate.hpp"
#include "memory/memory_plan.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using zf::test::count_lines;
using zf::test::kPrecious;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::tiny_run;
using zf::test::write_text;

namespace {

// `command` started in the background by the shell, which execs it (the pid is its own).
pid_t start(const std::string &command) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(dir)) found.push_back(entry.path().filename().string());
  return found;
}

}  // namespace

TEST_CASE("moved directories under mpirun: every rank keeps writing into the output directory and checkpoint.dir it "
          "started with, never into new ones of their names", "[files]") {
  const std::string dir = scratch_dir("recount_moved_ranks"), out = dir + "/out", ck = dir + "/ck";
  std::string command = tiny_run(dir, 40);
  command = zf::test::mpirun(2) + command.substr(command.find(zf::test::zfcore())) + "--set checkpoint.every=1" +
            " --set run.output_dir=" + out + " --set checkpoint.dir=" + ck + " >" + dir + "/run.log 2>&1";
  const pid_t run = start("timeout 120 " + command);
  for (int i = 0; i < 1200 && count_lines(out + "/steps.jsonl") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(count_lines(out + "/steps.jsonl") >= 2);
  fs::rename(out, dir + "/out.moved");
  fs::rename(ck, dir + "/ck.moved");
  fs::create_directories(out);
  fs::create_directories(ck);
  write_text(out + "/summary.json", kPrecious);  // the user's, in new directories of the old names
  write_text(ck + "/notes.txt", kPrecious);
  const int status = zf::test::wait_for_end(run, 120);
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_text(out + "/summary.json") == kPrecious);
  CHECK(entries(out) == std::vector<std::string>{"summary.json"});
  CHECK(entries(ck) == std::vector<std::string>{"notes.txt"});
  // Both ranks' files of the last checkpoint are where the run started, and the run's outputs too.
  CHECK(fs::exists(dir + "/ck.moved/step-00000040/rank-00000.safetensors"));
  CHECK(fs::exists(dir + "/ck.moved/step-00000040/rank-00001.safetensors"));
  CHECK(zf::test::json_field(read_text(dir + "/out.moved/summary.json"), "steps") == "40");
  CHECK(count_lines(dir + "/out.moved/steps.jsonl") == 40);
}

TEST_CASE("messages: a run whose output directory was moved mid-run names where its files are in its closing lines",
          "[files]") {
  const std::string dir = scratch_dir("recount_moved_closing"), out = dir + "/out", moved = dir + "/out.moved";
  std::string command = tiny_run(dir, 40);
  const pid_t run = start(command.substr(command.find(zf::test::zfcore())) + "--set checkpoint.every=20" +
                          " --set run.output_dir=" + out + " >" + dir + "/run.log 2>&1");
  for (int i = 0; i < 1200 && count_lines(out + "/steps.jsonl") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(count_lines(out + "/steps.jsonl") >= 2);
  fs::rename(out, moved);
  const int status = zf::test::wait_for_end(run, 120);
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(log, Catch::Contains("the directory it started with (now " + moved + ")") &&
                      Catch::Contains("zfcore: checkpoint " + moved + "/checkpoints/step-00000040\n") &&
                      Catch::Contains("zfcore: wrote " + moved + "/{steps.jsonl,") &&
                      !Catch::Contains("zfcore: wrote " + out + "/{"));
  CHECK(fs::exists(moved + "/checkpoints/step-00000040/checkpoint.json"));
  CHECK(!fs::exists(out));
}

TEST_CASE("messages: a model shape that --set made wrong is located at the --set, not in the file's [model]",
          "[files]") {
  const std::string dir = scratch_dir("recount_set_located");
  std::string validate = tiny_run(dir, 2) + "--set model.heads=3";
  validate.replace(validate.find(" run "), 5, " validate ");
  auto checked = run_command(validate);
  INFO(checked.output);
  CHECK(checked.exit_code == 1);
  CHECK_THAT(checked.output, Catch::Contains("[model] with --set model.heads=3") &&
                                 Catch::Contains("model.hidden = 32 is not divisible by model.heads = 3"));
}

TEST_CASE("plan: zfcore validate refuses a config whose memory plan does not fit, as the run does", "[files]") {
  const std::string dir = scratch_dir("recount_validate"), out = dir + "/out";
  const std::string words = "--set data.type=synthetic --set data.vocab=257 --set data.samples=80000 "
                            "--set train.micro_batch=80000 --set run.host_memory_limit_gb=4 --set run.output_dir=" + out;
  std::string validate = tiny_run(dir, 2) + words;
  validate.replace(validate.find(" run "), 5, " validate ");
  auto checked = run_command(validate);
  CHECK(!fs::exists(out));  // validate writes nothing
  auto run = run_command(tiny_run(dir, 2) + words);
  INFO(checked.output << "\n---\n" << run.output);
  CHECK(checked.exit_code == 1);
  CHECK(run.exit_code == 1);
  CHECK_THAT(checked.output, !Catch::Contains("valid ("));
  // The same refusal, word for word, up to the end of its advice on the micro-batch.
  auto refusal = [](const std::string &output) {
    const size_t begin = output.find("the memory plan does not fit");
    const size_t end = output.find("keep the batch)", begin);
    return begin == std::string::npos || end == std::string::npos ? std::string() : output.substr(begin, end - begin);
  };
  CHECK(refusal(checked.output) != "");
  CHECK(refusal(checked.output) == refusal(run.output));
  CHECK_THAT(checked.output, Catch::Contains("lower train.micro_batch (80000) or data.seq_len (32)"));
  // A model whose parameters cannot fit: refused by validate too, naming what the host allows.
  write_text(dir + "/big.toml", "[run]\nhost_memory_limit_gb = 4\n[model]\npreset = \"llama2-70b\"\n"
                                "dtype = \"bfloat16\"\n[data]\ntype = \"synthetic\"\nvocab = 32000\nseq_len = 32\n"
                                "[train]\nmicro_batch = 1\n");
  auto big = run_command("timeout 120 " + zf::test::zfcore() + " validate " + dir + "/big.toml");
  INFO(big.output);
  CHECK(big.exit_code == 1);
  CHECK_THAT(big.output, Catch::Contains("the memory plan does not fit") &&
                             Catch::Contains("this host allows 4.0 GiB (run.host_memory_limit_gb)"));
  // What fits is valid, as before.
  std::string fits = tiny_run(dir, 2) + "--set run.host_memory_limit_gb=4";
  fits.replace(fits.find(" run "), 5, " validate ");
  auto valid = run_command(fits);
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
  CHECK_THAT(valid.output, Catch::Contains("valid ("));
}

TEST_CASE("checks: zfcore validate refuses what the run refuses at once: a GPT-2 whose sequences exceed its position "
          "table, a text file given as token shards", "[files]") {
  const std::string dir = scratch_dir("recount_validate_positions"), out = dir + "/out";
  const std::string words = "--set data.seq_len=64 --set run.output_dir=" + out;  // model.max_seq = 32
  std::string validate = tiny_run(dir, 2) + words;
  validate.replace(validate.find(" run "), 5, " validate ");
  auto checked = run_command(validate);
  auto run = run_command(tiny_run(dir, 2) + words);
  INFO(checked.output << "\n---\n" << run.output);
  CHECK(checked.exit_code == 1);
  CHECK(run.exit_code == 1);
  for (const std::string &output : {checked.output, run.output})
    CHECK_THAT(output, Catch::Contains("--set data.seq_len=64: data.seq_len = 64 exceeds GPT-2's position table "
                                       "(model.max_seq = 32): set data.seq_len to at most 32 or raise model.max_seq"));
  CHECK(!fs::exists(out));  // refused before the output directory is made
  // A text file given as token shards: refused by validate as by the run, before anything is made.
  std::string tokens = validate + " --set data.type=tokens --set data.seq_len=32";
  auto as_tokens = run_command(tokens);
  INFO(as_tokens.output);
  CHECK(as_tokens.exit_code == 1);
  CHECK_THAT(as_tokens.output, Catch::Contains("data.path: " + dir + "/train.txt: not a zfcore token shard"));
  CHECK(!fs::exists(out));
}

TEST_CASE("plan: a GPU run's plan counts a micro-batch's activations on the GPU, so one that cannot hold them is "
          "refused before it allocates", "[files]") {
  const std::string dir = scratch_dir("recount_gpu_plan");
  write_text(dir + "/gpu.toml", "[model]\ntype = \"gpt2\"\nhidden = 1024\nlayers = 8\nheads = 16\nmax_seq = 2048\n"
                                "vocab = 50304\n[data]\ntype = \"synthetic\"\nvocab = 50304\nseq_len = 2048\n"
                                "[train]\nmicro_batch = 16\n");
  const zf::RunConfig config = zf::RunConfig::load(dir + "/gpu.toml", {}, {});
  const zf::MicroBatchMemory micro = zf::micro_batch_memory(config);
  REQUIRE(micro.activations > (1ull << 30));  // 32768 tokens: logits alone are gigabytes
  // The model's buffers on a GPU of 4 GiB beyond them: they fit; with the activations they do not.
  const uint64_t buffers = 2ull << 30, gpu = buffers + (micro.activations > (4ull << 30) ? 4ull << 30 : micro.activations / 2);
  zf::MemoryPlan plan;
  plan.buffers = {{ZF_TIER_DEVICE, "params", buffers}};
  const zf::HostMemoryLimit host{1ull << 50, "test"};
  auto advice = [] { return std::string("advice"); };
  CHECK_NOTHROW(zf::check_memory_plan(plan, host, 1, gpu, advice));
  zf::plan_micro_batch(plan, micro, /*on_gpu=*/true);
  CHECK(plan.bytes(ZF_TIER_DEVICE) == buffers + micro.activations);
  CHECK(plan.bytes(ZF_TIER_HOST) == micro.batch);  // the ids and targets stay host memory
  CHECK_THROWS_WITH(zf::check_memory_plan(plan, host, 1, gpu, advice),
                    Catch::Contains("the memory plan does not fit") && Catch::Contains("micro-batch activations"));
  // A CPU run holds both in host memory, as before.
  zf::MemoryPlan cpu;
  zf::plan_micro_batch(cpu, micro, /*on_gpu=*/false);
  CHECK(cpu.bytes(ZF_TIER_HOST) == micro.bytes());
  CHECK(cpu.bytes(ZF_TIER_DEVICE) == 0);
}

TEST_CASE("full disks: a checkpoint that meets a real file size limit (EFBIG) stops the run naming the file and the "
          "checkpoint it keeps, and the next run goes on from it", "[files]") {
  const std::string dir = scratch_dir("recount_file_size_limit"), out = dir + "/out";
  const std::string command = tiny_run(dir, 4) + "--set checkpoint.every=1 --set run.output_dir=" + out;
  REQUIRE(run_command(tiny_run(dir, 2) + "--set checkpoint.every=1 --set run.output_dir=" + out).exit_code == 0);
  const std::string step2 = out + "/checkpoints/step-00000002";
  const std::string kept = read_text(step2 + "/rank-00000.safetensors");
  REQUIRE(kept.size() > 200000);
  // The kernel's limit on a file's size (RLIMIT_FSIZE, 100 blocks of 512 or 1024 bytes): the step logs
  // fit, a checkpoint's file does not; its write fails with EFBIG as on a full disk.
  auto limited = run_command("ulimit -f 100 && " + command);
  INFO(limited.output);
  CHECK(limited.exit_code == 1);
  CHECK_THAT(limited.output, Catch::Contains("rank-00000.safetensors") && Catch::Contains("File too large") &&
                                 Catch::Contains("The checkpoint of step 3 is not written") &&
                                 Catch::Contains("the newest checkpoint is " + step2 + " (step 2)"));
  CHECK(read_text(step2 + "/rank-00000.safetensors") == kept);  // nothing lost
  CHECK(run_command(zf::test::zfcore() + " checkpoint verify " + step2).exit_code == 0);
  // Room again: the next run goes on from step 2, removing what the failed save left.
  auto resumed = run_command(command);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from " + step2 + " (step 2)") &&
                                 Catch::Contains("left by an interrupted save of this run"));
  std::vector<std::string> saves = entries(out + "/checkpoints");
  std::sort(saves.begin(), saves.end());
  CHECK(saves == std::vector<std::string>{"step-00000003", "step-00000004"});
  CHECK(count_lines(out + "/steps.jsonl") == 4);
}

TEST_CASE("prepared data: zfcore prepare never removes a directory of the user's beside its copy, nor writes through a "
          "link of its lock or failure record", "[files]") {
  const std::string dir = scratch_dir("recount_prepared"), cache = dir + "/cache";
  // A stand-in for prepare_data.py (ZFCORE_PYTHON runs it): writes the copy, or fails as the script does.
  write_text(dir + "/python", "#!/bin/sh\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=\"$2\"; shift; done\n"
                              "[ -f " + dir + "/fail ] && { echo 'error: the preparation failed'; exit 1; }\n"
                              "mkdir -p \"$out\" && printf x > \"$out/data.bin\" && echo '{\"documents\": 1}' > "
                              "\"$out/record.json\"\n");
  fs::permissions(dir + "/python", fs::perms::owner_all);
  auto prepare = [&](const std::string &content) {
    write_text(dir + "/chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"" + content + "\"}]}\n");
    return run_command("ZFCORE_PYTHON=" + dir + "/python " + zf::test::zfcore() + " prepare " + zf::test::source_dir() +
                       "/examples/quickstart.toml --set data.type=chat --set data.path=" + dir + "/chat.jsonl " +
                       "--set data.tokenizer=hf --set data.tokenizer_path=" + zf::test::source_dir() +
                       "/tests/fixtures/hf/gpt2_tokenizer/tokenizer.json --set data.prepared_dir=" + cache);
  };
  auto first = prepare("hello");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const size_t at = first.output.find("prepared in ") + 12;
  const std::string copy = first.output.substr(at, first.output.find(':', at) - at);
  REQUIRE(fs::exists(copy + "/data.bin"));
  // A directory of the user's where the preparation stages its copy: kept, and named.
  fs::create_directories(copy + ".tmp");
  write_text(copy + ".tmp/notes.txt", kPrecious);
  auto staged = prepare("hello again");
  INFO(staged.output);
  CHECK(staged.exit_code == 1);
  CHECK_THAT(staged.output, Catch::Contains(copy + ".tmp has no .zfcore-owner marker") &&
                                Catch::Contains("move it away"));
  CHECK(read_text(copy + ".tmp/notes.txt") == kPrecious);
  fs::remove_all(copy + ".tmp");
  // A link where the failure is recorded: replaced as a link, the file it points to untouched.
  write_text(dir + "/outside.txt", kPrecious);
  fs::create_symlink(dir + "/outside.txt", copy + ".failed");
  write_text(dir + "/fail", "");
  auto failed = prepare("hello a third time");
  INFO(failed.output);
  CHECK(failed.exit_code == 1);
  CHECK_THAT(failed.output, Catch::Contains("the preparation failed"));
  CHECK(read_text(dir + "/outside.txt") == kPrecious);
  fs::remove(dir + "/fail");
  // A link where the lock goes: refused, nothing created where it points.
  fs::remove(copy + ".lock");
  fs::create_symlink(dir + "/created-outside", copy + ".lock");
  auto locked = prepare("hello a fourth time");
  INFO(locked.output);
  CHECK(locked.exit_code == 1);
  CHECK_THAT(locked.output, Catch::Contains(copy + ".lock is a symbolic link"));
  CHECK(!fs::exists(fs::symlink_status(dir + "/created-outside")));
  // Without them, the changed data is prepared again: zfcore replaces its own copy.
  fs::remove(copy + ".lock");
  auto again = prepare("hello a fifth time");
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("the data file changed since"));
  CHECK(fs::exists(copy + "/data.bin"));
  // A copy an older zfcore prepared (no marker, its source.json) is still replaced when its data changes.
  fs::remove(copy + "/.zfcore-owner");
  auto older = prepare("hello a sixth time");
  INFO(older.output);
  CHECK(older.exit_code == 0);
  CHECK_THAT(older.output, Catch::Contains("the data file changed since"));
}

TEST_CASE("signals: SIGTERM during zfcore prepare ends the script, removes its unfinished copy, keeps the copy "
          "made before and says so", "[files]") {
  const std::string dir = scratch_dir("recount_prepare_signal"), cache = dir + "/cache";
  // A stand-in for prepare_data.py: writes its copy, then (with `slow` there) records its pid and waits.
  write_text(dir + "/python", "#!/bin/sh\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=\"$2\"; shift; done\n"
                              "mkdir -p \"$out\" && printf x > \"$out/data.bin\" && echo '{}' > \"$out/record.json\"\n"
                              "[ -f " + dir + "/slow ] && { echo $$ > " + dir + "/script.pid; sleep 60; }\nexit 0\n");
  fs::permissions(dir + "/python", fs::perms::owner_all);
  const std::string prepare = "env ZFCORE_PYTHON=" + dir + "/python " + zf::test::zfcore() + " prepare " +
                              zf::test::source_dir() + "/examples/quickstart.toml --set data.type=chat --set " +
                              "data.path=" + dir + "/chat.jsonl --set data.tokenizer=hf --set data.tokenizer_path=" +
                              zf::test::source_dir() + "/tests/fixtures/hf/gpt2_tokenizer/tokenizer.json " +
                              "--set data.prepared_dir=" + cache;
  write_text(dir + "/chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  auto first = run_command(prepare);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const size_t at = first.output.find("prepared in ") + 12;
  const std::string copy = first.output.substr(at, first.output.find(':', at) - at);
  // The data changed: prepared again, by a script that takes its time; SIGTERM meanwhile.
  const std::string data = "{\"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}\n";
  write_text(dir + "/chat.jsonl", data);
  write_text(dir + "/slow", "");
  const pid_t pid = start(prepare + " >" + dir + "/prepare.log 2>&1");
  for (int i = 0; i < 1200 && !fs::exists(dir + "/script.pid"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(dir + "/script.pid"));
  const int status = zf::test::stop(pid, SIGTERM);
  const std::string log = read_text(dir + "/prepare.log");
  INFO(log);
  CHECK(WIFEXITED(status));  // not killed by the signal: it said what it did
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(log, Catch::Contains("stopped by signal 15") && Catch::Contains("while preparing " + dir + "/chat.jsonl") &&
                      Catch::Contains("its unfinished copy " + copy + ".tmp removed") &&
                      Catch::Contains("the copy prepared before, " + copy + ", is kept") &&
                      Catch::Contains("run the command again"));
  CHECK(!fs::exists(copy + ".tmp"));
  CHECK(!fs::exists(copy + ".failed"));  // a stop is no failure of the data
  CHECK(read_text(copy + "/data.bin") == "x");
  CHECK(read_text(dir + "/chat.jsonl") == data);
  const pid_t script = std::stoi(read_text(dir + "/script.pid"));
  CHECK(kill(script, 0) != 0);  // the script was ended, not left writing
  // The same command prepares the changed data.
  fs::remove(dir + "/slow");
  auto again = run_command(prepare);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("the data file changed since"));
}

TEST_CASE("prepared data: a slow tokenizer's vocab.json or merges.txt changed is prepared again, not reused",
          "[files]") {
  const std::string dir = scratch_dir("recount_prepared_vocab"), tokenizer = dir + "/tokenizer";
  fs::create_directories(tokenizer);  // a tokenizer directory without tokenizer.json: transformers builds it from these
  write_text(tokenizer + "/tokenizer_config.json", "{\"tokenizer_class\": \"GPT2Tokenizer\"}\n");
  write_text(tokenizer + "/vocab.json", "{\"a\": 0, \"b\": 1}\n");
  write_text(tokenizer + "/merges.txt", "#version: 0.2\n");
  write_text(dir + "/python", "#!/bin/sh\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=\"$2\"; shift; done\n"
                              "mkdir -p \"$out\" && printf x > \"$out/data.bin\" && echo '{}' > \"$out/record.json\"\n");
  fs::permissions(dir + "/python", fs::perms::owner_all);
  write_text(dir + "/chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  const std::string prepare = "ZFCORE_PYTHON=" + dir + "/python " + zf::test::zfcore() + " prepare " +
                              zf::test::source_dir() + "/examples/quickstart.toml --set data.type=chat --set " +
                              "data.path=" + dir + "/chat.jsonl --set data.tokenizer=hf --set data.tokenizer_path=" +
                              tokenizer + " --set data.prepared_dir=" + dir + "/cache";
  REQUIRE(run_command(prepare).exit_code == 0);
  auto same = run_command(prepare);
  CHECK_THAT(same.output, Catch::Contains("prepared data reused"));
  for (const char *name : {"vocab.json", "merges.txt"}) {
    write_text(tokenizer + "/" + name, read_text(tokenizer + "/" + name) + "\n");
    auto changed = run_command(prepare);
    INFO(name << "\n" << changed.output);
    CHECK(changed.exit_code == 0);
    CHECK_THAT(changed.output, Catch::Contains("the tokenizer changed since") && !Catch::Contains("reused"));
  }
}

TEST_CASE("conflicts: checkpoint.export_hf into the directory of the tokenizer the run reads (a base model's) is "
          "refused before step 1, also through a link", "[files]") {
  const std::string dir = scratch_dir("recount_export_tokenizer"), base = dir + "/gpt2";
  fs::create_directories(base);
  const std::string fixture = zf::test::source_dir() + "/tests/fixtures/hf/gpt2_tokenizer/";
  for (const char *name : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(fixture + name, base + "/" + name);
  write_text(base + "/model.safetensors", kPrecious);  // the base model's weights, beside its tokenizer
  write_text(base + "/config.json", kPrecious);
  fs::create_directory_symlink(base, dir + "/link");
  const std::string tokenizer = "--set data.tokenizer=hf --set model.vocab=601 --set data.tokenizer_path=";
  for (const auto &[given, target] : std::vector<std::pair<std::string, std::string>>{
           {base, base}, {base + "/tokenizer.json", base + "/"}, {base + "/tokenizer.json", dir + "/link"}}) {
    auto run = run_command(tiny_run(dir, 1) + tokenizer + given + " --set run.output_dir=" + dir + "/out" +
                           " --set checkpoint.export_hf=" + target);
    INFO(run.output);
    CHECK(run.exit_code == 1);
    CHECK_THAT(run.output, Catch::Contains("checkpoint.export_hf = \"" + target + "\" is the directory of "
                                           "data.tokenizer_path = \"" + given + "\""));
    CHECK(!fs::exists(dir + "/out/steps.jsonl"));  // refused before step 1
  }
  // zfcore export, whose FILE reads the tokenizer there: refused alike.
  REQUIRE(run_command(tiny_run(dir, 1) + tokenizer + base + " --set run.output_dir=" + dir + "/run").exit_code == 0);
  write_text(dir + "/export.toml", read_text(zf::test::source_dir() + "/examples/quickstart.toml"));
  auto exported = run_command(zf::test::zfcore() + " export " + dir + "/run/checkpoints/step-00000001 " + base + " " +
                              dir + "/export.toml --set model.hidden=32 --set model.layers=1 --set model.heads=2 " +
                              "--set model.max_seq=32 " + tokenizer + base);
  INFO(exported.output);
  CHECK(exported.exit_code == 1);
  CHECK_THAT(exported.output, Catch::Contains("is the directory of data.tokenizer_path"));
  CHECK(read_text(base + "/model.safetensors") == kPrecious);
  CHECK(read_text(base + "/config.json") == kPrecious);
  // Beside it, in a directory of its own, the export is made.
  auto beside = run_command(tiny_run(dir, 1) + tokenizer + base + " --set run.output_dir=" + dir + "/out" +
                            " --set checkpoint.export_hf=" + dir + "/gpt2-finetuned");
  INFO(beside.output);
  CHECK(beside.exit_code == 0);
  CHECK(fs::exists(dir + "/gpt2-finetuned/model.safetensors"));
}

TEST_CASE("moved directories: a link in run.output_dir's path turned elsewhere mid-run: the checkpoints record the "
          "directory the run started in, and the resume there goes on from the last one", "[files]") {
  const std::string dir = scratch_dir("recount_link_turned"), a = dir + "/a";
  fs::create_directories(a);
  fs::create_directories(dir + "/b");
  fs::create_directory_symlink(a, dir + "/link");
  std::string command = tiny_run(dir, 16);
  const pid_t run = start(command.substr(command.find(zf::test::zfcore())) + "--set checkpoint.every=1" +
                          " --set run.output_dir=" + dir + "/link/out >" + dir + "/run.log 2>&1");
  for (int i = 0; i < 1200 && count_lines(a + "/out/steps.jsonl") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(count_lines(a + "/out/steps.jsonl") >= 2);
  fs::remove(dir + "/link");
  fs::create_directory_symlink(dir + "/b", dir + "/link");  // the same path now leads elsewhere
  const int status = zf::test::wait_for_end(run, 120);
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(entries(dir + "/b").empty());
  CHECK_THAT(read_text(a + "/out/.zfcore-latest"), Catch::Contains(a + "/out/checkpoints/step-00000016"));
  CHECK_THAT(log, Catch::Contains("prunes none of them any more"));
  // Resumed where the directory is: from step 16, not from a step saved before the link turned.
  auto resumed = run_command(tiny_run(dir, 18) + "--set checkpoint.every=1 --set run.output_dir=" + a + "/out");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from " + a + "/out/checkpoints/step-00000016 (step 16)"));
  CHECK(count_lines(a + "/out/steps.jsonl") == 18);
}

TEST_CASE("logs: an output directory whose .zfcore-run record was removed is still the run's its checkpoints name: "
          "another run.name is refused before it replaces the step log", "[files]") {
  const std::string dir = scratch_dir("recount_record_removed"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 3) + "--set run.name=a --set run.output_dir=" + out).exit_code == 0);
  const std::string log = read_text(out + "/steps.jsonl");
  fs::remove(out + "/.zfcore-run");  // tidied away by hand
  auto other = run_command(tiny_run(dir, 2) + "--set run.name=b --set checkpoint.resume=never --set run.output_dir=" +
                           out);
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Catch::Contains("of the run \"a\" (its run.name, recorded in " + out +
                                           "/checkpoints/step-00000003)") &&
                               Catch::Contains("or set run.name = \"a\" to continue that run"));
  CHECK(read_text(out + "/steps.jsonl") == log);
  // The run itself goes on there.
  auto resumed = run_command(tiny_run(dir, 4) + "--set run.name=a --set run.output_dir=" + out);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(count_lines(out + "/steps.jsonl") == 4);
}
