// Nothing lost, part 3, continued: what changes under a run is noticed. Data rewritten while a run
// reads it or replaced between a checkpoint and its resume; the output directory moved away and
// recreated by name mid-run; signals during exports and a record that cannot be written; a
// checkpoint whose rank files come from two saves; and the red-team's messages and outputs (an
// export's tokenizer files, a steps.csv with a byte order mark, excerpts, ds.JSON, --unset).
#include "checkpoint/safetensors_header.hpp"
#include "data/token_shard.hpp"
#include "files/tiny_run.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/inotify.h>

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
using zf::test::tiny_run;
using zf::test::write_text;

TEST_CASE("changed data: a token shard rewritten in place while a run reads it stops the run, naming the shard",
          "[files]") {
  const std::string dir = scratch_dir("changed_shard"), shard = dir + "/ids.bin";
  std::vector<int64_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7) % 250);
  zf::write_token_shard(shard, ids, 0);
  const uintmax_t bytes = fs::file_size(shard);
  const pid_t run = start_long_run(dir, dir + "/out", dir + "/run.log", "--set data.type=tokens --set data.path=" + shard);
  REQUIRE(count_lines(dir + "/out/steps.jsonl") >= 2);
  {  // Rewritten in place at the same size, every id 0: what the run maps would change under it.
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(zf::kTokenShardHeaderBytes);
    const std::string zeros(bytes - zf::kTokenShardHeaderBytes, '\0');
    file.write(zeros.data(), std::streamsize(zeros.size()));
  }
  REQUIRE(fs::file_size(shard) == bytes);
  const int status = zf::test::wait_for_end(run, 60);
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(log, Catch::Contains(shard + ": the token shard was written while in use"));
}

TEST_CASE("changed data: a resume on other data than its checkpoint's is refused with the way to go on, and the same "
          "data elsewhere resumes", "[files]") {
  const std::string dir = scratch_dir("changed_data"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out).exit_code == 0);
  const std::string trained = read_text(dir + "/train.txt");
  // The same text under another name: the same data, resumed without a word.
  write_text(dir + "/copy.txt", trained);
  auto moved = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out + " --set data.path=" + dir + "/copy.txt");
  INFO(moved.output);
  CHECK(moved.exit_code == 0);
  CHECK_THAT(moved.output, Catch::Contains("resumed from") && !Catch::Contains("data changed"));

  // data.path replaced by other text of the same size: refused before step 4, saying how to go on.
  std::string other = trained;
  std::reverse(other.begin(), other.end());
  const std::string command = tiny_run(dir, 4) + "--set run.output_dir=" + out;  // (tiny_run writes train.txt)
  write_text(dir + "/train.txt", other);
  auto replaced = run_command(command);
  INFO(replaced.output);
  CHECK(replaced.exit_code == 1);
  CHECK_THAT(replaced.output, Catch::Contains(out + "/checkpoints/step-00000003 was trained on data.path = \"" + dir +
                                              "/copy.txt\"") &&
                                  Catch::Contains("the data changed since the checkpoint") &&
                                  Catch::Contains("checkpoint.resume_data = \"new\""));
  CHECK(read_text(out + "/steps.jsonl").find("{\"step\":4,") == std::string::npos);
  // The user says so: the run continues on the new data, and says that too.
  write_text(dir + "/train.txt", other);
  auto accepted = run_command(command + " --set checkpoint.resume_data=new");
  INFO(accepted.output);
  CHECK(accepted.exit_code == 0);
  CHECK_THAT(accepted.output, Catch::Contains("continues on it (checkpoint.resume_data = \"new\")"));
  CHECK(read_text(out + "/steps.jsonl").find("{\"step\":4,") != std::string::npos);
}

TEST_CASE("moved output directory: a run whose directory is moved away mid-run keeps writing there, never into a "
          "new directory of the same name", "[files]") {
  const std::string dir = scratch_dir("changed_moved"), out = dir + "/out", moved = dir + "/moved";
  const pid_t run = start_long_run(dir, out, dir + "/run.log", "--set checkpoint.every=1");
  REQUIRE(count_lines(out + "/steps.jsonl") >= 2);
  fs::rename(out, moved);
  fs::create_directories(out);
  write_text(out + "/summary.json", kPrecious);  // the user's, in a new directory of the old name
  const size_t before = count_lines(moved + "/steps.jsonl");
  for (int i = 0; i < 1200 && count_lines(moved + "/steps.jsonl") < before + 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int status = zf::test::stop(run, SIGTERM);  // saves a checkpoint, then the summary and report
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(read_text(out + "/summary.json") == kPrecious);
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(out)) found.push_back(entry.path().filename().string());
  CHECK(found == std::vector<std::string>{"summary.json"});  // no checkpoints, steps.csv, report.html
  CHECK(zf::test::json_field(read_text(moved + "/summary.json"), "steps") != "");
  CHECK(fs::exists(moved + "/report.html"));
  CHECK(count_lines(moved + "/steps.csv") >= before + 3);
  size_t newest = 0;  // checkpoints saved after the move are where the run started
  for (const auto &entry : fs::directory_iterator(moved + "/checkpoints"))
    if (entry.path().filename().string().rfind("step-", 0) == 0 && fs::exists(entry.path() / "checkpoint.json"))
      newest = std::max<size_t>(newest, std::stoul(entry.path().filename().string().substr(5, 8)));
  CHECK(newest >= before + 3);
  CHECK_THAT(log, Catch::Contains(out + " was moved away or replaced while this run writes into it"));
}

namespace {

// The tiny run's shape, wider, so that writing its weights takes a few milliseconds.
const char *const kWide = " --set model.hidden=256 --set model.heads=4 --set model.layers=2 ";

// `zfcore export CHECKPOINT OUT` started in the background, its output in `log`: zfcore's pid.
pid_t start_export(const std::string &dir, const std::string &checkpoint, const std::string &out,
                   const std::string &log) {
  const std::string command = "exec " + zf::test::zfcore() + " export " + checkpoint + " " + out + kWide +
                              "--set model.max_seq=32 --set data.seq_len=32 --set data.path=" + dir +
                              "/train.txt --set sample.tokens=0 >" + log + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

// Starts an export into `out` (which exists) and sends `signal` as soon as its weights' temporary
// appears (inotify): the wait status, or -1 when it never appeared.
int signal_export_midway(const std::string &dir, const std::string &checkpoint, const std::string &out,
                         const std::string &log, int signal) {
  const int watch = inotify_init1(IN_CLOEXEC);
  inotify_add_watch(watch, out.c_str(), IN_CREATE);
  const pid_t pid = start_export(dir, checkpoint, out, log);
  bool sent = false;
  alignas(inotify_event) char buffer[4096];
  pollfd poll_fd{watch, POLLIN, 0};
  while (!sent && poll(&poll_fd, 1, 60000) > 0) {
    const ssize_t n = read(watch, buffer, sizeof buffer);
    for (ssize_t at = 0; at < n && !sent;) {
      const auto *event = reinterpret_cast<const inotify_event *>(buffer + at);
      if (event->len > 0 && std::string(event->name).rfind(".model.safetensors.zf-", 0) == 0) sent = kill(pid, signal) == 0;
      at += ssize_t(sizeof(inotify_event) + event->len);
    }
  }
  close(watch);
  int status = 0;
  waitpid(pid, &status, 0);
  return sent ? status : -1;
}

std::vector<std::string> temporaries_in(const std::string &dir) {
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) found.push_back(name);
  }
  return found;
}

}  // namespace

TEST_CASE("signals: SIGTERM during zfcore export stops it with a word and no temporary, and the temporaries of an export "
          "killed outright go with the next export into the directory", "[files]") {
  const std::string dir = scratch_dir("changed_export_signal"), run_out = dir + "/run";
  REQUIRE(run_command(tiny_run(dir, 1) + kWide + "--set run.output_dir=" + run_out).exit_code == 0);
  const std::string checkpoint = run_out + "/checkpoints/step-00000001";
  // SIGTERM as the weights are written: the export stops, says so and removes its temporaries.
  bool stopped = false;
  for (int attempt = 0; attempt < 5 && !stopped; ++attempt) {
    const std::string out = dir + "/term" + std::to_string(attempt);
    fs::create_directories(out);
    const int status = signal_export_midway(dir, checkpoint, out, dir + "/term.log", SIGTERM);
    const std::string log = read_text(dir + "/term.log");
    INFO(log);
    REQUIRE(status != -1);
    CHECK(WIFEXITED(status));  // not killed by the signal
    CHECK(temporaries_in(out).empty());
    stopped = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    if (stopped) {
      CHECK_THAT(log, Catch::Contains("stopped by signal 15") && Catch::Contains("its temporary is removed"));
      CHECK(!fs::exists(out + "/model.safetensors"));
    }
  }
  CHECK(stopped);  // (an export that finished before the signal landed is tried again)

  // SIGKILL: nothing can clean up; the next export into the directory removes what it left.
  const std::string out = dir + "/killed";
  fs::create_directories(out);
  const int killed = signal_export_midway(dir, checkpoint, out, dir + "/kill.log", SIGKILL);
  REQUIRE(killed != -1);
  REQUIRE(WIFSIGNALED(killed));
  const std::vector<std::string> left = temporaries_in(out);
  REQUIRE(!left.empty());
  const int again = zf::test::wait_for_end(start_export(dir, checkpoint, out, dir + "/again.log"), 120);
  const std::string log = read_text(dir + "/again.log");
  INFO(log);
  CHECK(WIFEXITED(again));
  CHECK(WEXITSTATUS(again) == 0);
  CHECK(temporaries_in(out).empty());
  CHECK_THAT(log, Catch::Contains(out + ": removed ") && Catch::Contains(left[0]) &&
                      Catch::Contains("left by an export that was killed"));
  CHECK(fs::exists(out + "/model.safetensors"));
  CHECK_THAT(read_text(out + "/.zfcore-export"), Catch::StartsWith("model.safetensors\n"));  // no token: its files
}

TEST_CASE("full disks: a save whose .zfcore-latest record cannot be written stops with a clear error and keeps the "
          "checkpoint", "[files]") {
  const std::string dir = scratch_dir("changed_latest_record"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out + " --set checkpoint.every=1").exit_code == 0);
  // The record's write fails (as on a full disk): here a directory stands where its rename goes.
  fs::remove(out + "/.zfcore-latest");
  fs::create_directories(out + "/.zfcore-latest");
  auto failed = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + out + " --set checkpoint.every=1");
  INFO(failed.output);
  CHECK(failed.exit_code == 1);
  const std::string step3 = out + "/checkpoints/step-00000003";
  CHECK_THAT(failed.output, Catch::Contains("the checkpoint " + step3 + " is saved whole, but recording it as "
                                            "the run's newest in " + out + " failed") &&
                                Catch::Contains("--set checkpoint.resume=" + step3));
  auto verify = run_command(zf::test::zfcore() + " checkpoint verify " + step3);
  CHECK(verify.exit_code == 0);
  // The way the message gives goes on from step 3.
  fs::remove(out + "/.zfcore-latest");
  auto resumed = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + out + " --set checkpoint.every=1 " +
                             "--set checkpoint.resume=" + step3);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from " + step3 + " (step 3)"));
}

TEST_CASE("exports: a bare data.tokenizer_path = tokenizer.json exports the tokenizer files zfcore read, not the "
          "other files beside it", "[files]") {
  const std::string dir = scratch_dir("changed_tokenizer_neighbours");
  const std::string fixture = zf::test::source_dir() + "/tests/fixtures/hf/gpt2_tokenizer/";
  fs::copy_file(fixture + "tokenizer.json", dir + "/tokenizer.json");
  fs::copy_file(fixture + "tokenizer_config.json", dir + "/tokenizer_config.json");
  // Another model's files, in the same directory.
  for (const char *name : {"vocab.json", "merges.txt", "chat_template.jinja"}) write_text(dir + "/" + name, kPrecious);
  auto run = run_command("cd " + dir + " && " + tiny_run(dir, 1) + "--set data.tokenizer=hf --set " +
                         "data.tokenizer_path=tokenizer.json --set model.vocab=601 --set run.output_dir=out " +
                         "--set checkpoint.export_hf=hf");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  CHECK(read_text(dir + "/hf/tokenizer.json") == read_text(dir + "/tokenizer.json"));
  CHECK(read_text(dir + "/hf/tokenizer_config.json") == read_text(dir + "/tokenizer_config.json"));
  for (const char *name : {"vocab.json", "merges.txt", "chat_template.jinja"}) CHECK(!fs::exists(dir + "/hf/" + name));
  // A directory given: the tokenizer files transformers reads from it, as before.
  auto whole = run_command("cd " + dir + " && " + tiny_run(dir, 1) + "--set data.tokenizer=hf --set " +
                           "data.tokenizer_path=. --set model.vocab=601 --set run.output_dir=out2 " +
                           "--set checkpoint.export_hf=hf2");
  INFO(whole.output);
  REQUIRE(whole.exit_code == 0);
  CHECK(fs::exists(dir + "/hf2/merges.txt"));
}

TEST_CASE("mixed checkpoints: verify names a rank file copied in from another step, and a resume falls back to the "
          "checkpoint before it, saying so", "[files]") {
  const std::string dir = scratch_dir("changed_mixed_ranks"), out = dir + "/out", store = out + "/checkpoints";
  auto on_two = [&](int steps) {
    std::string command = tiny_run(dir, steps) + "--set run.output_dir=" + out + " --set checkpoint.every=1 " +
                          "--set checkpoint.keep=3";
    return command.replace(command.find(zf::test::zfcore()), 0, zf::test::mpirun(2));
  };
  auto trained = run_command(on_two(3));
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  fs::copy_file(store + "/step-00000002/rank-00001.safetensors", store + "/step-00000003/rank-00001.safetensors",
                fs::copy_options::overwrite_existing);
  auto verify = run_command(zf::test::zfcore() + " checkpoint verify " + store + "/step-00000003");
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK_THAT(verify.output, Catch::Contains(store + "/step-00000003/rank-00001.safetensors holds step 2") &&
                                Catch::Contains("its rank files come from different saves"));
  auto resumed = run_command(on_two(4));
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("checkpoint " + store + "/step-00000003 is damaged") &&
                                 Catch::Contains("trying the one before it") &&
                                 Catch::Contains("resumed from " + store + "/step-00000002 (step 2)"));
}

TEST_CASE("logs: a steps.csv saved again with a UTF-8 byte order mark keeps one step column on resume", "[files]") {
  const std::string dir = scratch_dir("changed_csv_bom"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out).exit_code == 0);
  const std::string before = read_text(out + "/steps.csv");
  write_text(out + "/steps.csv", "\xEF\xBB\xBF" + before);  // as a spreadsheet saves it
  auto resumed = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out);
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  std::ifstream csv(out + "/steps.csv");
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);
  auto fields = [](std::string line) {
    if (line.rfind("\xEF\xBB\xBF", 0) == 0) line = line.substr(3);
    std::vector<std::string> out(1);
    for (char ch : line)
      if (ch == ',') out.emplace_back();
      else out.back().push_back(ch);
    return out;
  };
  const std::vector<std::string> header = fields(lines[0]);
  CHECK(header == fields(before.substr(0, before.find('\n'))));  // the columns the run wrote, no second step
  for (const std::string &row : lines) CHECK(fields(row).size() == header.size());
  for (int step = 1; step <= 3; ++step) CHECK(fields(lines[size_t(step)])[0] == std::to_string(step));
}

TEST_CASE("messages: an excerpt of text is cut between UTF-8 characters, never inside one", "[files]") {
  for (size_t ascii = 95; ascii <= 100; ++ascii) {
    std::string text(ascii, 'a');
    for (int i = 0; i < 10; ++i) text += "\xE2\x82\xAC";  // the euro sign, three bytes
    const std::string cut = zf::excerpt(text);
    INFO(ascii);
    CHECK(zf::utf8_problem(cut).empty());
    CHECK(cut.size() > 3);
    CHECK(text.rfind(cut.substr(0, cut.size() - 3), 0) == 0);  // a prefix of the text, then "..."
    CHECK(cut.size() - 3 >= 97);                                // at most one character shorter
  }
}

TEST_CASE("messages: a DeepSpeed config named ds.JSON is read as DeepSpeed JSON, as ds.json is", "[files]") {
  const std::string dir = scratch_dir("changed_json_case");
  const std::string json = read_text(zf::test::source_dir() + "/tests/config/deepspeed/getting_started.json");
  const std::string model = " --set model.type=linear_stack --set model.hidden=64 --set model.layers=2 "
                            "--set data.type=random --set data.samples=64 --set train.steps=2";
  for (const char *name : {"ds.json", "ds.JSON", "ds.Json"}) {
    write_text(dir + "/" + name, json);
    auto valid = run_command(zf::test::zfcore() + " validate " + dir + "/" + name + model);
    INFO(name << ": " << valid.output);
    CHECK(valid.exit_code == 0);  // as TOML, the file would be a syntax error at 1:1
  }
}

TEST_CASE("messages: --unset model.type on a text config fails in validate, naming model.type", "[files]") {
  const std::string dir = scratch_dir("changed_unset_type");
  for (const char *command : {" validate ", " run "}) {
    std::string line = tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/out --unset model.type";
    line.replace(line.find(" run "), 5, command);
    auto outcome = run_command(line);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains("model.type = \"linear_stack\" (the default where no model.type is set) "
                                               "trains on data.type = \"random\" only"));
    CHECK(!fs::exists(dir + "/out/steps.jsonl"));
  }
}

TEST_CASE("messages: a safetensors shape of 2^62 elements is named as more than 2^64 bytes, not as 0 bytes",
          "[files]") {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  file += header;
  try {
    zf::parse_safetensors_header(reinterpret_cast<const unsigned char *>(file.data()), file.size(), "huge.safetensors");
    FAIL("a shape of 2^62 elements was accepted");
  } catch (const zf::Error &e) {
    CHECK_THAT(e.what(), Catch::Contains("huge.safetensors: tensor 'w': shape [2147483648,2147483648] of F32 is "
                                         "4611686018427387904 elements, more than 2^64 bytes") &&
                             !Catch::Contains("needs 0 bytes"));
  }
}

TEST_CASE("messages: an init_from whose generation_config.json links outside it is refused before step 1, not at the "
          "export after training", "[files]") {
  const std::string dir = scratch_dir("changed_init_from_link"), base = dir + "/base";
  REQUIRE(run_command(tiny_run(dir, 1) + "--set run.output_dir=" + dir + "/seed --set checkpoint.export_hf=" + base)
              .exit_code == 0);
  write_text(dir + "/elsewhere.json", "{}\n");
  fs::remove(base + "/generation_config.json");
  fs::create_symlink(dir + "/elsewhere.json", base + "/generation_config.json");
  auto tuned = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/ft --set model.init_from=" + base +
                           " --set checkpoint.export_hf=" + dir + "/ft_hf");
  INFO(tuned.output);
  CHECK(tuned.exit_code == 1);
  CHECK_THAT(tuned.output, Catch::Contains("model.init_from: " + base + "/generation_config.json") &&
                               Catch::Contains("copies it into the export"));
  CHECK(read_text(dir + "/ft/steps.jsonl").find("{\"step\":1,") == std::string::npos);  // refused before step 1
}

TEST_CASE("exports: zfcore export of a byte-level model needs no data: the text it trained on may be gone",
          "[files]") {
  const std::string dir = scratch_dir("changed_export_no_data"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out).exit_code == 0);
  fs::remove(dir + "/train.txt");  // moved to another machine, or deleted
  fs::create_directories(dir + "/elsewhere");
  auto exported = run_command("cd " + dir + "/elsewhere && timeout 120 " + zf::test::zfcore() + " export " + out +
                              "/checkpoints/step-00000002 hf");
  INFO(exported.output);
  CHECK(exported.exit_code == 0);
  CHECK(fs::exists(dir + "/elsewhere/hf/model.safetensors"));
  CHECK(fs::exists(dir + "/elsewhere/hf/tokenizer.json"));  // the byte tokenizer's files, written by zfcore
}

TEST_CASE("logs: a restart with checkpoint.resume = never where the run's checkpoints are is refused before step 1, "
          "and the step log stays one run's", "[files]") {
  const std::string dir = scratch_dir("changed_resume_never"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 4) + "--set run.output_dir=" + out + " --set checkpoint.every=2").exit_code == 0);
  const std::string rows = read_text(out + "/steps.jsonl");
  auto restarted = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + out + " --set checkpoint.every=2 " +
                               "--set checkpoint.resume=never");
  INFO(restarted.output);
  CHECK(restarted.exit_code == 1);
  CHECK_THAT(restarted.output, Catch::Contains(out + "/checkpoints/step-00000004 is in the way"));
  CHECK(read_text(out + "/steps.jsonl") == rows);  // not replaced by a second run's rows
  auto resumed = run_command(tiny_run(dir, 5) + "--set run.output_dir=" + out + " --set checkpoint.every=2");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(count_lines(out + "/steps.jsonl") == 5);  // rows 1-4 of the first run, then its step 5
}

TEST_CASE("tensorboard: after event files named for a far future or past 200 bytes, each resume's file sorts last and "
          "its name does not grow", "[files]") {
  const std::string dir = scratch_dir("changed_tensorboard_names"), out = dir + "/out", events = out + "/tensorboard";
  REQUIRE(run_command(tiny_run(dir, 1) + "--set run.output_dir=" + out).exit_code == 0);
  write_text(events + "/events.out.tfevents.99999999999999.elsewhere.1", "");
  write_text(events + "/events.out.tfevents.99999999999999" + std::string(200, 'z'), "");  // 234 bytes
  std::vector<std::string> seen;
  for (const auto &entry : fs::directory_iterator(events)) seen.push_back(entry.path().filename().string());
  std::vector<std::string> created;
  for (int steps = 2; steps <= 4; ++steps) {
    auto resumed = run_command(tiny_run(dir, steps) + "--set run.output_dir=" + out);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    std::string newest, made;
    for (const auto &entry : fs::directory_iterator(events)) {
      const std::string name = entry.path().filename().string();
      newest = std::max(newest, name);
      if (std::find(seen.begin(), seen.end(), name) == seen.end()) made = name;
    }
    REQUIRE(!made.empty());
    CHECK(made == newest);  // TensorBoard reads it last: its START drops the older files' later steps
    created.push_back(made);
    seen.push_back(made);
  }
  for (const std::string &name : created) CHECK(name.size() <= created[0].size() + 2);  // (a pid may gain a digit)
}
