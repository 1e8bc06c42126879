// Nothing lost, part 3 (the red-team's root causes): the run's lock is the directory's, held by the
// process, so no file removal lets a second run in; every place a run or an export writes is checked
// before step 1; an interrupted save never blocks a resume; command-line paths stay strings.
#include "files/tiny_run.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using zf::test::count_lines;
using zf::test::kPrecious;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::start_long_run;
using zf::test::stop;
using zf::test::tiny_run;
using zf::test::write_text;


TEST_CASE("lock: removing .zfcore.lock lets no second run in, and a killed run's lock is taken over with a word",
          "[files]") {
  const std::string dir = scratch_dir("conflicts_lock"), out = dir + "/out";
  const pid_t first = start_long_run(dir, out, dir + "/first.log");
  REQUIRE(count_lines(out + "/steps.jsonl") >= 2);
  CHECK_THAT(read_text(out + "/.zfcore.lock"), Catch::StartsWith("pid " + std::to_string(first) + " on "));
  fs::remove(out + "/.zfcore.lock");
  auto second = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out);
  const std::string first_rows = read_text(out + "/steps.jsonl");
  INFO(second.output);
  CHECK(second.exit_code == 1);
  CHECK_THAT(second.output, Catch::Contains("run.output_dir = \"" + out + "\" is in use by another process"));
  // The first run's step log is its own still (the second would have replaced it with its steps 1-3).
  CHECK(count_lines(out + "/steps.jsonl") >= 2);
  CHECK(stop(first, SIGKILL) != 0);
  CHECK_THAT(read_text(out + "/steps.jsonl"), Catch::StartsWith(first_rows.substr(0, first_rows.find('\n'))));

  // A run killed with its lock file in place: the next run takes the lock over and says so.
  const std::string other = dir + "/other";
  const pid_t killed = start_long_run(dir, other, dir + "/killed.log");
  REQUIRE(count_lines(other + "/steps.jsonl") >= 2);
  CHECK(stop(killed, SIGKILL) != 0);
  auto next = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + other);
  INFO(next.output);
  CHECK(next.exit_code == 0);
  CHECK_THAT(next.output, Catch::Contains(other + "/.zfcore.lock names pid " + std::to_string(killed)) &&
                              Catch::Contains("takes the lock over"));
  // A run that ended leaves the lock free and named by no one: the run after it says nothing of it.
  CHECK(read_text(other + "/.zfcore.lock").empty());
  auto after = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + other);
  CHECK(after.exit_code == 0);
  CHECK_THAT(after.output, !Catch::Contains("takes the lock over"));
}

namespace {

// `zfcore export CHECKPOINT OUT` of a tiny run's checkpoint, from `cwd`, with the run's shape.
zf::test::Outcome export_tiny(const std::string &dir, const std::string &cwd, const std::string &checkpoint,
                              const std::string &out) {
  return run_command("cd " + cwd + " && timeout 120 " + zf::test::zfcore() + " export " + checkpoint + " " + out +
                     " --set model.hidden=32 --set model.layers=1 --set model.heads=2 --set model.max_seq=32 "
                     "--set data.seq_len=32 --set data.path=" + dir + "/train.txt --set sample.tokens=0");
}

}  // namespace

TEST_CASE("conflicts: a step directory in the way, an export into init_from or into a checkpoint are refused "
          "before step 1", "[files]") {
  const std::string dir = scratch_dir("conflicts_before"), out = dir + "/out";
  // A user's directory where the final checkpoint goes: refused before any step trains.
  fs::create_directories(out + "/checkpoints/step-00000003");
  write_text(out + "/checkpoints/step-00000003/notes.txt", kPrecious);
  auto in_the_way = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out);
  INFO(in_the_way.output);
  CHECK(in_the_way.exit_code == 1);
  CHECK_THAT(in_the_way.output, Catch::Contains(out + "/checkpoints/step-00000003 is in the way of this run's "
                                                      "checkpoint of step 3"));
  CHECK(read_text(out + "/steps.jsonl").find("{\"step\":1,") == std::string::npos);  // nothing trained
  CHECK(read_text(out + "/checkpoints/step-00000003/notes.txt") == kPrecious);

  // checkpoint.export_hf equal to, or inside, model.init_from: the base model is never overwritten.
  const std::string base = dir + "/base";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/seed --set checkpoint.export_hf=" + base)
              .exit_code == 0);
  const std::string weights = read_text(base + "/model.safetensors");
  for (const std::string &target : {base, base + "/", base + "/finetuned"}) {
    auto into_model = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/ft --set model.init_from=" +
                                  base + " --set checkpoint.export_hf=" + target);
    INFO(into_model.output);
    CHECK(into_model.exit_code == 1);
    CHECK_THAT(into_model.output, Catch::Contains("checkpoint.export_hf = \"" + target + "\" is") &&
                                      Catch::Contains("model.init_from = \"" + base + "\""));
    CHECK(!fs::exists(dir + "/ft/checkpoints"));  // refused before step 1
  }
  CHECK(read_text(base + "/model.safetensors") == weights);
  CHECK(!fs::exists(base + "/finetuned"));

  // zfcore export into another run's checkpoint, into a directory inside it, or into its checkpoint directory.
  const std::string second = dir + "/second", other = dir + "/seed/checkpoints/step-00000002";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + second).exit_code == 0);
  for (const std::string &target : {other, other + "/hf", dir + "/seed/checkpoints"}) {
    auto across = export_tiny(dir, dir, second + "/checkpoints/step-00000002", target);
    INFO(across.output);
    CHECK(across.exit_code == 1);
    CHECK_THAT(across.output, Catch::Contains("zfcore export: OUT_DIR " + target + " is"));
  }
  CHECK(!fs::exists(other + "/hf"));
  CHECK(!fs::exists(other + "/model.safetensors"));
  CHECK(!fs::exists(other + "/config.json"));
}

TEST_CASE("conflicts: an export into a directory of the user's files is refused before step 1, their files kept "
          "byte for byte, and zfcore's own export directory is exported into again", "[files]") {
  const std::string dir = scratch_dir("conflicts_export_owned"), mine = dir + "/mine", hf = dir + "/hf";
  fs::create_directories(mine);
  write_text(mine + "/config.json", kPrecious);  // the user's own model, or an older zfcore's export: no record
  write_text(mine + "/model.safetensors", kPrecious);
  auto refused = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/out --set checkpoint.export_hf=" + mine);
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Catch::Contains("checkpoint.export_hf = \"" + mine + "\" holds config.json and "
                                             "model.safetensors, which no zfcore export wrote") &&
                                 Catch::Contains("export into a new or empty directory") &&
                                 Catch::Contains("older zfcore"));
  CHECK(!fs::exists(dir + "/out/steps.jsonl"));  // before step 1
  // Its own export directory: exported into again by a resumed run, and by zfcore export.
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/out --set checkpoint.export_hf=" + hf)
              .exit_code == 0);
  const std::string first = read_text(hf + "/model.safetensors");
  auto resumed = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + dir + "/out --set checkpoint.export_hf=" + hf);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from") && Catch::Contains("exported the model"));
  CHECK(read_text(hf + "/model.safetensors") != first);
  const std::string step2 = dir + "/out/checkpoints/step-00000002";
  auto again = export_tiny(dir, dir, step2, hf);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(read_text(hf + "/model.safetensors") == first);  // step 2's model again
  // zfcore export into the user's directory: refused alike, naming OUT_DIR.
  auto exported = export_tiny(dir, dir, step2, mine);
  INFO(exported.output);
  CHECK(exported.exit_code == 1);
  CHECK_THAT(exported.output, Catch::Contains("zfcore export: OUT_DIR " + mine + " holds config.json and "
                                              "model.safetensors, which no zfcore export wrote"));
  CHECK(read_text(mine + "/config.json") == kPrecious);
  CHECK(read_text(mine + "/model.safetensors") == kPrecious);
}

TEST_CASE("interrupted saves: a temporary of this run without its marker never blocks a resume, and the log says "
          "what was removed or stepped around", "[files]") {
  const std::string dir = scratch_dir("conflicts_interrupted"), out = dir + "/out", store = out + "/checkpoints";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out + " --set checkpoint.every=1").exit_code == 0);
  const std::string id = zf::test::json_field(read_text(store + "/step-00000002/checkpoint.json"), "run_id");
  REQUIRE(!id.empty());
  // Killed between creating step 3's temporary and marking it: an empty directory.
  fs::create_directories(store + "/step-00000003." + id + ".tmp");
  // A full disk while marking step 4's: the marker's own temporary, no marker.
  fs::create_directories(store + "/step-00000004." + id + ".tmp");
  write_text(store + "/step-00000004." + id + ".tmp/.zfcore-owner.zf-1-2-3.tmp", "");
  // Killed while writing step 5's files: a full-size temporary with its marker.
  fs::copy(store + "/step-00000002", store + "/step-00000005." + id + ".tmp", fs::copy_options::recursive);
  auto resumed = run_command(tiny_run(dir, 5) + "--set run.output_dir=" + out + " --set checkpoint.every=1 " +
                             "--set checkpoint.keep=10");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("removed the empty " + store + "/step-00000003." + id + ".tmp, left by "
                                             "an interrupted save of this run"));
  CHECK_THAT(resumed.output, Catch::Contains(store + "/step-00000004." + id + ".tmp, left by an interrupted save of "
                                             "this run, has no .zfcore-owner marker") &&
                                 Catch::Contains("this save writes " + store + "/step-00000004.2." + id + ".tmp"));
  CHECK_THAT(resumed.output, Catch::Contains("removed " + store + "/step-00000005." + id + ".tmp, left by an "
                                             "interrupted save of this run"));
  for (int step : {3, 4, 5}) CHECK(fs::exists(store + "/step-0000000" + std::to_string(step) + "/checkpoint.json"));
  CHECK(fs::exists(store + "/step-00000004." + id + ".tmp"));  // not proven zfcore's: left
  CHECK(!fs::exists(store + "/step-00000004.2." + id + ".tmp"));
  // And the next resume is not blocked either.
  auto again = run_command(tiny_run(dir, 6) + "--set run.output_dir=" + out + " --set checkpoint.every=1");
  INFO(again.output);
  CHECK(again.exit_code == 0);
}

TEST_CASE("command-line paths are strings: 1e-3 and 1e3 and 0x10 and true name directories as typed, and 1e309 is named", "[files]") {
  const std::string dir = scratch_dir("conflicts_strings");
  auto number = run_command("cd " + dir + " && " + tiny_run(dir, 2) + "--set run.output_dir=1e3");
  INFO(number.output);
  CHECK(number.exit_code == 0);
  CHECK(fs::exists(dir + "/1e3/steps.jsonl"));
  CHECK(!fs::exists(dir + "/1000"));
  auto hex = run_command("cd " + dir + " && " + tiny_run(dir, 2) + "--set run.name=0x10");
  INFO(hex.output);
  CHECK(hex.exit_code == 0);
  CHECK(fs::exists(dir + "/runs/0x10/steps.jsonl"));
  CHECK(!fs::exists(dir + "/runs/16"));
  // A quoted TOML string is still unquoted.
  auto quoted = run_command("cd " + dir + " && " + tiny_run(dir, 2) + "--set 'run.output_dir=\"q 1\"'");
  CHECK(quoted.exit_code == 0);
  CHECK(fs::exists(dir + "/q 1/steps.jsonl"));

  const std::string checkpoint = dir + "/1e3/checkpoints/step-00000002";
  for (const std::string &name : {"1e-3", "true", "0x10"}) {
    auto exported = export_tiny(dir, dir, checkpoint, name);
    INFO(exported.output);
    CHECK(exported.exit_code == 0);
    CHECK(fs::exists(dir + "/" + name + "/model.safetensors"));
  }
  CHECK(!fs::exists(dir + "/0.001"));

  // A number beyond a double is named as one, where it was set; as a string key's value it is a name.
  auto huge = run_command("cd " + dir + " && " + tiny_run(dir, 2) + "--set optimizer.lr=1e309");
  INFO(huge.output);
  CHECK(huge.exit_code == 1);
  CHECK_THAT(huge.output, Catch::Contains("--set optimizer.lr=1e309: 1e309 is beyond the range of a number"));
  auto named = run_command("cd " + dir + " && " + tiny_run(dir, 2) + "--set run.name=1e309");
  CHECK(named.exit_code == 0);
  CHECK(fs::exists(dir + "/runs/1e309/steps.jsonl"));
}

TEST_CASE("messages: a run refused before it wrote its step log leaves no claim that refuses a retry under another "
          "name", "[files]") {
  const std::string dir = scratch_dir("conflicts_stale_claim"), out = dir + "/out";
  // A run refused by its memory plan, with the hidden size of a large model: it recorded its name only.
  auto refused = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out + " --set run.name=first " +
                             "--set model.hidden=65536 --set model.heads=64 --set model.layers=64");
  INFO(refused.output);
  REQUIRE(refused.exit_code == 1);
  REQUIRE(!fs::exists(out + "/steps.jsonl"));
  auto retry = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out + " --set run.name=second");
  INFO(retry.output);
  CHECK(retry.exit_code == 0);
  CHECK_THAT(retry.output, !Catch::Contains("steps.jsonl, steps.csv, summary.json) of the run \"first\""));
  CHECK(read_text(out + "/.zfcore-run") == "second\n");
  // Once a run wrote its step log, another name is still refused.
  auto third = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out + " --set run.name=third");
  CHECK(third.exit_code == 1);
  CHECK_THAT(third.output, Catch::Contains("of the run \"second\""));
}

TEST_CASE("messages: a tiny sample.temperature samples as greedy decoding does, instead of failing after training",
          "[files]") {
  const std::string dir = scratch_dir("conflicts_temperature");
  auto sample = [&](const std::string &out, const std::string &temperature) {
    auto run = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/" + out + " --set sample.tokens=8 " +
                           "--set sample.temperature=" + temperature);
    INFO(run.output);
    CHECK(run.exit_code == 0);
    // The sampled text: from the line after "zfcore: sample (...):" to the next line of zfcore's.
    const size_t at = run.output.find("zfcore: sample (");
    if (at == std::string::npos) return std::string();
    const size_t begin = run.output.find(":\n", at) + 2;
    const size_t end = std::min(run.output.find("\nzfcore", begin), run.output.find("\n[zfcore", begin));
    return run.output.substr(begin, end - begin);
  };
  const std::string greedy = sample("greedy", "0");
  REQUIRE(!greedy.empty());
  CHECK(sample("tiny", "1e-300") == greedy);  // the largest logit only, as argmax takes it
}
