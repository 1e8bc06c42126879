// Checkpoints touch only what is theirs: a save removes only what its run created; checkpoints
// carry their run's identity and a checksum over their metadata; resume, eval and pruning consider
// only the run's own checkpoints; a step-N link that cannot be followed is a clear error.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace zf;
namespace fs = std::filesystem;

namespace {

const std::string kSmall = " --set run.progress=off --set model.hidden=64 --set train.micro_batch=16 ";

test::Outcome run_small(const std::string &dir, int steps, const std::string &extra = "") {
  return test::run_command(test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml" + kSmall +
                           extra + " --set train.steps=" + std::to_string(steps) + " --set run.output_dir=" + dir);
}

void write_file(const std::string &path, const std::string &text) {
  std::ofstream out(path);
  out << text;
}

}  // namespace

TEST_CASE("a save removes only what its run created: a user's step-* directories and exports stay",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_leftovers"), ck = dir + "/ck";
  for (const char *name : {"step-by-step-notes", "step-archive.tmp", "step-5-hf", "step-00000001.tmp",
                           "step-00000002.deleting", "step-00000007"}) {
    fs::create_directories(ck + "/" + name);
    write_file(ck + "/" + name + "/README", "the user's\n");
  }
  test::Outcome run = run_small(dir + "/out", 4, "--set checkpoint.every=1 --set checkpoint.keep=1 "
                                                 "--set checkpoint.dir=" + ck);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  for (const char *name : {"step-by-step-notes", "step-archive.tmp", "step-5-hf", "step-00000001.tmp",
                           "step-00000002.deleting", "step-00000007"})
    CHECK(fs::exists(ck + "/" + name + "/README"));
  CHECK(fs::exists(ck + "/step-00000004/checkpoint.json"));  // keep = 1: the run's own newest
  CHECK_FALSE(fs::exists(ck + "/step-00000003"));
}

TEST_CASE("checkpoint metadata carries a checksum and the step of its name: a flipped bit or a copy under another "
          "name is found", "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_metadata");
  test::Outcome run = run_small(dir, 2, "--set checkpoint.every=1");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::string step2 = dir + "/checkpoints/step-00000002";
  // A copy under another step name is not that step.
  fs::copy(step2, dir + "/checkpoints/step-00000009", fs::copy_options::recursive);
  test::Outcome copied = test::run_command(test::zfcore() + " checkpoint verify " + dir + "/checkpoints/step-00000009");
  CHECK(copied.exit_code == 1);
  CHECK_THAT(copied.output, Catch::Contains("holds step 2, not the step of its name"));
  // A resume skips it and continues at step 2, where the run really was.
  test::Outcome resumed = run_small(dir, 4, "--set checkpoint.every=1");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "first_step") == "3");
  // One bit of world_size flipped ("1" -> "3") in a rank file's metadata.
  const std::string file = dir + "/checkpoints/step-00000004/rank-00000.safetensors";
  std::string bytes = test::read_text(file);
  const size_t at = bytes.find("\"world_size\":\"1\"");
  REQUIRE(at != std::string::npos);
  bytes[at + 14] = '3';
  { std::ofstream(file, std::ios::binary) << bytes; }
  test::Outcome verify = test::run_command(test::zfcore() + " checkpoint verify " + dir + "/checkpoints/step-00000004");
  CHECK(verify.exit_code == 1);
  CHECK_THAT(verify.output, Catch::Contains("rank-00000.safetensors: the metadata") &&
                                Catch::Contains("does not match its checksum"));
}

TEST_CASE("runs sharing a checkpoint.dir keep to their own checkpoints: resume, eval and pruning", "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_runs"), ck = dir + "/ck";
  const std::string shared = "--set checkpoint.every=1 --set checkpoint.keep=2 --set checkpoint.dir=" + ck;
  test::Outcome a = run_small(dir + "/a", 4, shared + " --set run.name=a");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  // Run b trains its own 2 steps (it does not take a's step 4 for its own, finished run), and its
  // saves prune only its own checkpoints.
  test::Outcome b = run_small(dir + "/b", 2, shared + " --set run.name=b --set checkpoint.keep=1");
  INFO(b.output);
  REQUIRE(b.exit_code == 0);
  CHECK(b.output.find("the run is complete") == std::string::npos);
  CHECK(test::json_field(test::read_text(dir + "/b/summary.json"), "first_step") == "1");
  CHECK_THAT(b.output, Catch::Contains("checkpoint(s) of other runs"));
  CHECK(fs::exists(ck + "/step-00000003/checkpoint.json"));
  CHECK(fs::exists(ck + "/step-00000004/checkpoint.json"));
  CHECK(fs::exists(ck + "/step-00000002/checkpoint.json"));  // b's
  CHECK_FALSE(fs::exists(ck + "/step-00000001"));            // b's first, pruned by b (keep = 1)
  // zfcore eval of run b reads b's newest (step 2), not a's newer step 4.
  test::Outcome eval = test::run_command(test::zfcore() + " eval " + test::source_dir() + "/examples/linear_stack.toml" +
                                         kSmall + "--json --set data.eval_fraction=0.1 --set run.name=b " + shared +
                                         " --set run.output_dir=" + dir + "/b");
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains("\"step\":2") && Catch::Contains("step-00000002"));
  // Run a goes on from its own step 4.
  test::Outcome again = run_small(dir + "/a", 5, shared + " --set run.name=a");
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/a/summary.json"), "first_step") == "5");
  // A checkpoint of another run resumed by name says whose it is.
  test::Outcome branch = run_small(dir + "/c", 3, "--set run.name=c --set checkpoint.resume=" + ck + "/step-00000002");
  INFO(branch.output);
  CHECK(branch.exit_code == 0);
  CHECK_THAT(branch.output, Catch::Contains("belongs to the run \"b\""));
}

TEST_CASE("a step-N link that cannot be followed is a clear error at resume and skipped when pruning",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_link_loop"), ck = dir + "/checkpoints";
  fs::create_directories(ck);
  fs::create_directory_symlink("step-00000001", ck + "/step-00000001");  // a link to itself
  test::Outcome auto_resume = run_small(dir, 2);
  CHECK(auto_resume.exit_code != 0);
  CHECK_THAT(auto_resume.output, Catch::Contains("step-00000001 cannot be read as a checkpoint") &&
                                     !Catch::Contains("internal error"));
  test::Outcome never = run_small(dir, 2, "--set checkpoint.resume=never");
  INFO(never.output);
  CHECK(never.exit_code == 0);
  CHECK(fs::exists(dir + "/summary.json"));
  CHECK(fs::is_symlink(ck + "/step-00000001"));
}

TEST_CASE("a damaged step-N that zfcore did not write is left where it is, not moved aside", "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_foreign_damaged"), ck = dir + "/checkpoints";
  REQUIRE(run_small(dir, 2, "--set checkpoint.every=1").exit_code == 0);
  // The user's own directory, named like a newer checkpoint, with a checkpoint.json of theirs.
  fs::create_directories(ck + "/step-00000099");
  write_file(ck + "/step-00000099/checkpoint.json", "{\"mine\": true}\n");
  write_file(ck + "/step-00000099/notes.txt", "the user's\n");
  test::Outcome resumed = run_small(dir, 3, "--set checkpoint.every=1");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "first_step") == "3");
  CHECK_THAT(resumed.output, Catch::Contains("step-00000099 is damaged") && Catch::Contains("left where it is"));
  CHECK(test::read_text(ck + "/step-00000099/notes.txt") == "the user's\n");
  CHECK(test::read_text(ck + "/step-00000099/checkpoint.json") == "{\"mine\": true}\n");
  CHECK_FALSE(fs::exists(ck + "/step-00000099.damaged"));
}

TEST_CASE("two runs of one run.name in other output directories keep and prune only their own checkpoints",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_same_name"), ck = dir + "/ck";
  const std::string shared = "--set checkpoint.every=1 --set run.name=x --set checkpoint.dir=" + ck;
  test::Outcome original = run_small(dir + "/a", 3, shared + " --set checkpoint.keep=10");
  INFO(original.output);
  REQUIRE(original.exit_code == 0);
  // A branch in its own output directory continues from the newest checkpoint of run.name x ...
  test::Outcome branch = run_small(dir + "/b", 5, shared + " --set checkpoint.keep=1");
  INFO(branch.output);
  REQUIRE(branch.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/b/summary.json"), "first_step") == "4");
  CHECK_THAT(branch.output, Catch::Contains("of the output directory") && Catch::Contains("keeps its own checkpoints"));
  // ... and keep = 1 prunes its own step 4, never the original's steps 1-3.
  for (const char *step : {"step-00000001", "step-00000002", "step-00000003", "step-00000005"})
    CHECK(fs::exists(ck + "/" + step + "/checkpoint.json"));
  CHECK_FALSE(fs::exists(ck + "/step-00000004"));
  // The original, resumed in its own directory from its step 3, does not replace the branch's step 5.
  test::Outcome again = run_small(dir + "/a", 5, shared + " --set checkpoint.keep=10 --set checkpoint.resume=" + ck +
                                                     "/step-00000003");
  INFO(again.output);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.output, Catch::Contains("step-00000005 is in the way of this run's checkpoint of step 5"));
  CHECK(fs::exists(ck + "/step-00000005/checkpoint.json"));
}

TEST_CASE("pruning removes only the files a save wrote: a user's file in a checkpoint stays, with its directory",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_prune_files"), ck = dir + "/checkpoints";
  const std::string keep_one = "--set checkpoint.every=1 --set checkpoint.keep=1";
  REQUIRE(run_small(dir, 1, keep_one).exit_code == 0);
  write_file(ck + "/step-00000001/notes.txt", "the user's\n");
  test::Outcome pruned = run_small(dir, 3, keep_one);
  INFO(pruned.output);
  REQUIRE(pruned.exit_code == 0);
  CHECK(test::read_text(ck + "/step-00000001/notes.txt") == "the user's\n");
  CHECK_FALSE(fs::exists(ck + "/step-00000001/checkpoint.json"));  // no checkpoint any more: nothing resumes it
  CHECK_FALSE(fs::exists(ck + "/step-00000001/rank-00000.safetensors"));
  CHECK_THAT(pruned.output, Catch::Contains("holds entries zfcore did not write (notes.txt)"));
  CHECK_FALSE(fs::exists(ck + "/step-00000002"));
  CHECK(fs::exists(ck + "/step-00000003/checkpoint.json"));
  // A step a run writes again (resumed from an earlier one) is refused while it holds a user's file.
  REQUIRE(run_small(dir, 4, "--set checkpoint.every=1 --set checkpoint.keep=2").exit_code == 0);
  write_file(ck + "/step-00000004/notes.txt", "the user's\n");
  test::Outcome again = run_small(dir, 4, "--set checkpoint.every=1 --set checkpoint.keep=2 --set checkpoint.resume=" +
                                              ck + "/step-00000003");
  INFO(again.output);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.output, Catch::Contains("step-00000004 holds notes.txt, which zfcore did not write: move it away"));
  CHECK(test::read_text(ck + "/step-00000004/notes.txt") == "the user's\n");
  CHECK(fs::exists(ck + "/step-00000004/checkpoint.json"));
}

TEST_CASE("checkpoint verify checks checkpoint.json against its checksum and refuses absurd nesting",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_record"), ck = dir + "/checkpoints";
  REQUIRE(run_small(dir, 3, "--set checkpoint.every=1 --set checkpoint.keep=3").exit_code == 0);
  auto edit = [](const std::string &path, const std::string &from, const std::string &to) {
    std::string text = test::read_text(path);
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    write_file(path, text.replace(at, from.size(), to));
  };
  // world_size 1 -> 2: another global batch for checkpoint.resume_batch = "keep", another layout.
  edit(ck + "/step-00000003/checkpoint.json", "\"world_size\":1", "\"world_size\":2");
  test::Outcome verify = test::run_command(test::zfcore() + " checkpoint verify " + ck + "/step-00000003");
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK_THAT(verify.output, Catch::Contains("step-00000003/checkpoint.json does not match the checksum") &&
                                Catch::Contains("rank-00000.safetensors records"));
  // micro_batch edited: a resume of it names the damage, not a global batch nobody trained with.
  edit(ck + "/step-00000002/checkpoint.json", "\"micro_batch\":16", "\"micro_batch\":4");
  test::Outcome resume = run_small(dir + "/b", 4, "--set checkpoint.resume=" + ck + "/step-00000002");
  INFO(resume.output);
  CHECK(resume.exit_code == 1);
  CHECK_THAT(resume.output, Catch::Contains("is damaged") && Catch::Contains("checkpoint.json does not match"));
  CHECK_THAT(resume.output, !Catch::Contains("global batch"));
  // 200,000 levels of nesting: a located refusal, not a crash nor "ok".
  write_file(ck + "/step-00000001/checkpoint.json", std::string(200000, '[') + std::string(200000, ']'));
  test::Outcome deep = test::run_command(test::zfcore() + " checkpoint verify " + ck + "/step-00000001");
  INFO(deep.output);
  CHECK(deep.exit_code == 1);
  CHECK_THAT(deep.output, Catch::Contains("step-00000001/checkpoint.json: not valid JSON: arrays and objects nest "
                                          "deeper than 256 levels (at byte 256)"));
}

TEST_CASE("a user's copy of a checkpoint under another name is neither resumed from nor pruned", "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_copy_name"), out = dir + "/out";
  test::Outcome first = run_small(out, 4);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::string ck = out + "/checkpoints";
  fs::copy(ck + "/step-00000004", ck + "/step-4", fs::copy_options::recursive);  // cp -a: the marker too
  test::Outcome more = run_small(out, 7, "--set checkpoint.every=1 --set checkpoint.keep=1");
  INFO(more.output);
  REQUIRE(more.exit_code == 0);
  CHECK_THAT(more.output, Catch::Contains("step-00000004 (step 4)"));
  CHECK(more.output.find("step-4 ") == std::string::npos);
  CHECK(fs::exists(ck + "/step-00000007/checkpoint.json"));
  CHECK(fs::exists(ck + "/step-4/checkpoint.json"));  // the user's copy stays, whole
  CHECK(fs::exists(ck + "/step-4/rank-00000.safetensors"));
}

TEST_CASE("a user's copy of a checkpoint under another step's name is neither pruned nor resumed from",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_copy_step"), ck = dir + "/checkpoints";
  const std::string keep_one = "--set checkpoint.every=1 --set checkpoint.keep=1";
  REQUIRE(run_small(dir, 4, keep_one).exit_code == 0);
  // cp -a step-00000004 step-00000003 (an older step's name) and step-00000009 (a newer one): the
  // ownership marker goes with them.
  for (const char *name : {"step-00000003", "step-00000009"})
    fs::copy(ck + "/step-00000004", ck + "/" + name, fs::copy_options::recursive);
  REQUIRE(fs::exists(ck + "/step-00000003/.zfcore-owner"));
  const std::string bytes = test::read_text(ck + "/step-00000004/rank-00000.safetensors");
  test::Outcome more = run_small(dir, 6, keep_one);
  INFO(more.output);
  REQUIRE(more.exit_code == 0);
  // The run continues its own step 4, not the copy named step 9, and prunes its step 4 and 5 only.
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "first_step") == "5");
  CHECK_THAT(more.output, Catch::Contains(ck + "/step-00000009 is not the checkpoint of its name's step: it holds "
                                               "step 4"));
  CHECK_THAT(more.output, Catch::Contains(ck + "/step-00000003 is not this run's checkpoint of its step: it holds "
                                               "step 4"));
  for (const char *name : {"step-00000003", "step-00000009"}) {
    CHECK(test::read_text(ck + "/" + name + "/rank-00000.safetensors") == bytes);
    CHECK(fs::exists(ck + "/" + name + "/checkpoint.json"));
  }
  CHECK_FALSE(fs::exists(ck + "/step-00000009.damaged"));
  CHECK_FALSE(fs::exists(ck + "/step-00000004"));
  CHECK(fs::exists(ck + "/step-00000006/checkpoint.json"));
  // eval reads the run's own newest, step 6.
  test::Outcome eval = test::run_command(test::zfcore() + " eval " + test::source_dir() + "/examples/linear_stack.toml" +
                                         kSmall + "--json --set data.eval_fraction=0.1 --set run.output_dir=" + dir);
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains("\"step\":6"));
}

TEST_CASE("a second run.name in one run.output_dir is refused before it replaces the first run's step log",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_output_name");
  REQUIRE(run_small(dir, 2, "--set run.name=a --set checkpoint.every=1").exit_code == 0);
  const std::string jsonl = test::read_text(dir + "/steps.jsonl"), csv = test::read_text(dir + "/steps.csv");
  const std::string summary = test::read_text(dir + "/summary.json");
  test::Outcome other = run_small(dir, 3, "--set run.name=b --set checkpoint.every=1");
  INFO(other.output);
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.output, Catch::Contains("holds the step log and summary") && Catch::Contains("of the run \"a\"") &&
                               Catch::Contains("run.name = \"b\"") && Catch::Contains("runs/b"));
  CHECK(test::read_text(dir + "/steps.jsonl") == jsonl);
  CHECK(test::read_text(dir + "/steps.csv") == csv);
  CHECK(test::read_text(dir + "/summary.json") == summary);
  CHECK_FALSE(fs::exists(dir + "/checkpoints/step-00000003"));
  // The first run continues there as before.
  test::Outcome again = run_small(dir, 3, "--set run.name=a --set checkpoint.every=1");
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "first_step") == "3");
}

TEST_CASE("two branches of one run.name sharing a checkpoint.dir each resume and evaluate their own line",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_branch_lines"), ck = dir + "/ck";
  const std::string shared = "--set checkpoint.every=1 --set run.name=x --set checkpoint.dir=" + ck;
  REQUIRE(run_small(dir + "/a", 3, shared + " --set checkpoint.keep=10").exit_code == 0);
  // Branch b starts from a's step 3 and goes on to step 5.
  test::Outcome branch = run_small(dir + "/b", 5, shared + " --set checkpoint.keep=10");
  INFO(branch.output);
  REQUIRE(branch.exit_code == 0);
  REQUIRE(test::json_field(test::read_text(dir + "/b/summary.json"), "first_step") == "4");
  auto eval = [&](const std::string &out) {
    return test::run_command(test::zfcore() + " eval " + test::source_dir() + "/examples/linear_stack.toml" + kSmall +
                             "--json --set data.eval_fraction=0.1 " + shared + " --set run.output_dir=" + out);
  };
  // eval of a reads a's newest, step 3, not b's step 5; eval of b reads b's.
  test::Outcome eval_a = eval(dir + "/a");
  INFO(eval_a.output);
  CHECK(eval_a.exit_code == 0);
  CHECK_THAT(eval_a.output, Catch::Contains("\"step\":3") && Catch::Contains("another branch of run \"x\""));
  test::Outcome eval_b = eval(dir + "/b");
  INFO(eval_b.output);
  CHECK_THAT(eval_b.output, Catch::Contains("\"step\":5"));
  // a continues its own line from step 3 (b's step 4 is b's: a's step 4 is refused, not mixed).
  const std::string b_step4 = test::read_text(ck + "/step-00000004/rank-00000.safetensors");
  test::Outcome again = run_small(dir + "/a", 4, shared + " --set checkpoint.keep=10");
  INFO(again.output);
  CHECK_THAT(again.output, Catch::Contains("resumed from " + ck + "/step-00000003"));
  CHECK(again.output.find("the run is complete") == std::string::npos);
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.output, Catch::Contains("step-00000004 is in the way of this run's checkpoint of step 4"));
  CHECK(test::read_text(ck + "/step-00000004/rank-00000.safetensors") == b_step4);
}

TEST_CASE("after going back to an earlier checkpoint, resume and eval follow the line the run continued",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("own_went_back"), ck = dir + "/checkpoints";
  const std::string every = "--set checkpoint.every=1 --set checkpoint.keep=10";
  REQUIRE(run_small(dir, 6, every).exit_code == 0);
  const std::string left = test::read_text(ck + "/step-00000006/rank-00000.safetensors");
  // Back to step 3, on to step 5: step 6 of the first line is left.
  test::Outcome back = run_small(dir, 5, every + " --set checkpoint.resume=" + ck + "/step-00000003");
  INFO(back.output);
  REQUIRE(back.exit_code == 0);
  test::Outcome eval = test::run_command(test::zfcore() + " eval " + test::source_dir() + "/examples/linear_stack.toml" +
                                         kSmall + "--json --set data.eval_fraction=0.1 --set run.output_dir=" + dir);
  INFO(eval.output);
  CHECK(eval.exit_code == 0);
  CHECK_THAT(eval.output, Catch::Contains("\"step\":5") && Catch::Contains(ck + "/step-00000006: newer than this run's last "
                                                                           "recorded save") &&
                              Catch::Contains("left by a line it abandoned"));
  CHECK(test::read_text(ck + "/step-00000006/rank-00000.safetensors") == left);
  test::Outcome next = run_small(dir, 7, every);
  INFO(next.output);
  CHECK(next.exit_code == 0);
  CHECK_THAT(next.output, Catch::Contains("resumed from " + ck + "/step-00000005"));
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "first_step") == "6");
}
