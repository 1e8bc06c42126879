// Runs, exports and bench suites under the filesystem rule: a link named like one of zfcore's files
// is never written through, a failed export removes only its own temporaries and leaves the old
// files together, a FIFO input is refused instead of waited on, names that would leave their
// directory are refused, and values that cannot train are refused where they are set.
#include "data/token_shard.hpp"
#include "files/tiny_run.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace fs = std::filesystem;
using zf::test::kPrecious;
using zf::test::tiny_run;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::write_text;

TEST_CASE("runs: links named like the run's own files leave the files they point to untouched", "[files]") {
  const std::string dir = scratch_dir("runs_links"), out = dir + "/out";
  fs::create_directories(out);
  for (const char *name : {"steps.jsonl", "steps.csv", "summary.json", ".zfcore-write-test"}) {
    write_text(dir + "/victim-" + name, kPrecious);
    fs::create_symlink(dir + "/victim-" + name, out + "/" + name);
  }
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + out);
  INFO(run.output);
  CHECK(run.exit_code == 0);
  for (const char *name : {"steps.jsonl", "steps.csv", "summary.json", ".zfcore-write-test"})
    CHECK(read_text(dir + "/victim-" + std::string(name)) == kPrecious);
  // The run wrote files of its own in their place.
  CHECK(!fs::is_symlink(out + "/steps.jsonl"));
  CHECK(read_text(out + "/steps.jsonl").find("{\"step\":2,") != std::string::npos);
  CHECK(zf::test::json_field(read_text(out + "/summary.json"), "steps") == "2");
}

TEST_CASE("runs: a link named .zfcore.lock is refused, the file it points to untouched", "[files]") {
  const std::string dir = scratch_dir("runs_lock_link"), out = dir + "/out";
  fs::create_directories(out);
  write_text(dir + "/victim", kPrecious);
  fs::create_symlink(dir + "/victim", out + "/.zfcore.lock");
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + out);
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains(out + "/.zfcore.lock is a symbolic link"));
  CHECK(read_text(dir + "/victim") == kPrecious);
}

TEST_CASE("runs: a link named tensorboard is refused, the directory it points to left empty", "[files]") {
  const std::string dir = scratch_dir("runs_tensorboard_link"), out = dir + "/out";
  fs::create_directories(out);
  fs::create_directories(dir + "/elsewhere");
  fs::create_directory_symlink(dir + "/elsewhere", out + "/tensorboard");
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + out + " --set run.tensorboard=true");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains(out + "/tensorboard is a symbolic link"));
  CHECK(fs::is_empty(dir + "/elsewhere"));
}

TEST_CASE("runs: a resumed run reads no link named like its step logs and writes a new log in its place", "[files]") {
  const std::string dir = scratch_dir("runs_resume_links"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out).exit_code == 0);
  const std::map<std::string, std::string> victims{{"steps.csv", "1,the user's row\n"},
                                                   {"steps.jsonl", "{\"step\":1,\"user\":true}\n"}};
  for (const auto &[name, text] : victims) {
    write_text(dir + "/victim-" + name, text);
    fs::remove(out + "/" + name);
    fs::create_symlink(dir + "/victim-" + name, out + "/" + name);
  }
  auto resumed = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + out);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains(out + "/steps.csv is a symbolic link"));
  for (const auto &[name, text] : victims) {
    CHECK(read_text(dir + "/victim-" + name) == text);
    CHECK(!fs::is_symlink(out + "/" + name));
    CHECK(read_text(out + "/" + name).find("user") == std::string::npos);  // nothing read through the link
  }
  // The new logs hold the resumed steps, the CSV under its header.
  CHECK(read_text(out + "/steps.jsonl").find("{\"step\":4,") != std::string::npos);
  CHECK(read_text(out + "/steps.csv").rfind("step,loss,", 0) == 0);
}

TEST_CASE("runs: a FIFO named steps.jsonl stops a resumed run with its name, without hanging", "[files]") {
  const std::string dir = scratch_dir("runs_fifo_log"), out = dir + "/out";
  auto first = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out);
  REQUIRE(first.exit_code == 0);
  fs::remove(out + "/steps.jsonl");
  REQUIRE(mkfifo((out + "/steps.jsonl").c_str(), 0644) == 0);
  auto resumed = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + out);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 1);  // not 124: timeout's code for a run that hung
  CHECK_THAT(resumed.output, Catch::Contains(out + "/steps.jsonl") && Catch::Contains("FIFO"));
}

TEST_CASE("export: a failure removes only its own temporaries and leaves the old files together", "[files]") {
  const std::string dir = scratch_dir("export_failed"), exported = dir + "/hf";
  fs::create_directories(exported + "/generation_config.json/in-the-way");  // the export cannot put its file there
  write_text(exported + "/.zfcore-export", "config.json\n");  // an earlier export's directory (its record)
  write_text(exported + "/config.json", "{\"old\": true}\n");
  write_text(exported + "/notes.tmp", kPrecious);
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/out --set checkpoint.export_hf=" + exported);
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("generation_config.json: a directory of that name is in the way"));
  CHECK(read_text(exported + "/notes.tmp") == kPrecious);
  CHECK(read_text(exported + "/config.json") == "{\"old\": true}\n");
  CHECK(!fs::exists(exported + "/model.safetensors"));  // no new weights beside the old config.json
  size_t entries = 0;
  for (const auto &entry : fs::directory_iterator(exported)) entries += entry.path().filename() != "" ? 1 : 0;
  CHECK(entries == 4);  // .zfcore-export, config.json, notes.tmp, generation_config.json/: no temporary left
}

TEST_CASE("export: a link named like an export temporary is left alone", "[files]") {
  const std::string dir = scratch_dir("export_tmp_link"), exported = dir + "/hf";
  fs::create_directories(exported);
  write_text(exported + "/.zfcore-export", "config.json\n");  // an earlier export's directory (its record)
  write_text(dir + "/victim", kPrecious);
  for (const char *name : {"model.safetensors.tmp", "config.json.tmp", "generation_config.json.tmp"})
    fs::create_symlink(dir + "/victim", exported + "/" + name);
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/out --set checkpoint.export_hf=" + exported);
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK(read_text(dir + "/victim") == kPrecious);
  CHECK(fs::is_regular_file(fs::symlink_status(exported + "/model.safetensors")));
  CHECK(fs::is_symlink(exported + "/model.safetensors.tmp"));  // the user's link, not zfcore's to remove
}

TEST_CASE("export: init_from's generation_config.json as a FIFO or nested too deep is refused, not read",
          "[files]") {
  const std::string dir = scratch_dir("export_generation_config"), model = dir + "/model";
  auto seed = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/seed --set checkpoint.export_hf=" + model);
  REQUIRE(seed.exit_code == 0);
  fs::remove(model + "/generation_config.json");
  REQUIRE(mkfifo((model + "/generation_config.json").c_str(), 0644) == 0);
  // Each run in an output directory of its own: a checkpoint of another run is not replaced.
  auto command = [&](const std::string &out) {
    return tiny_run(dir) + "--set model.init_from=" + model + " --set run.output_dir=" + dir + "/" + out +
           " --set checkpoint.export_hf=" + dir + "/hf";
  };
  auto fifo = run_command(command("out-fifo"));
  INFO(fifo.output);
  CHECK(fifo.exit_code == 1);  // not 124: the export did not wait on the FIFO
  CHECK_THAT(fifo.output, Catch::Contains("generation_config.json") && Catch::Contains("FIFO"));

  fs::remove(model + "/generation_config.json");
  write_text(model + "/generation_config.json", std::string(200000, '[') + std::string(200000, ']'));
  auto deep = run_command(command("out-deep"));
  INFO(deep.output);
  CHECK(deep.exit_code == 1);  // not a crash
  CHECK_THAT(deep.output, Catch::Contains("generation_config.json: not valid JSON") &&
                              Catch::Contains("nest deeper"));
}

TEST_CASE("config: values that cannot train and run names that leave runs/ are refused where they are set",
          "[files]") {
  const std::string dir = scratch_dir("config_untrainable");
  const std::string run = tiny_run(dir) + "--set run.output_dir=" + dir + "/out ";
  for (const auto &[set, expected] : std::vector<std::pair<std::string, std::string>>{
           {"optimizer.eps=inf", "optimizer.eps = inf: must be a finite number"},
           {"model.norm_eps=inf", "model.norm_eps = inf: must be a finite number"},
           {"optimizer.eps=1e39", "optimizer.eps = 1e+39 is beyond what fp32 holds"},
           {"model.norm_eps=1e39", "model.norm_eps = 1e+39 is beyond what fp32 holds"},
           {"optimizer.lr=1e39", "optimizer.lr = 1e+39 is beyond what fp32 holds"},
           {"optimizer.weight_decay=1e39", "optimizer.weight_decay = 1e+39 is beyond what fp32 holds"}}) {
    auto outcome = run_command(run + "--set " + set);
    INFO(set << "\n" << outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains(expected));
  }
  for (const char *name : {"../escaped", "a/b", ".."}) {
    auto outcome = run_command(tiny_run(dir) + "--set run.name=" + name);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains("run.name = \"" + std::string(name) + "\""));
  }
  CHECK(!fs::exists("escaped"));
}

TEST_CASE("bench: a row named '..' or '.' is refused before anything is written", "[files]") {
  const std::string dir = scratch_dir("bench_dot_rows");
  write_text(dir + "/keep.txt", kPrecious);
  for (const char *row : {"..:none", ".:none"}) {
    auto outcome = run_command("timeout 60 " + zf::test::zfcore() + " bench convergence --device cpu --num-steps 2 "
                               "--rows '" + std::string(row) + "' --output-dir " + dir);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 2);
    CHECK_THAT(outcome.output, Catch::Contains("not '.' or '..'"));
    CHECK(read_text(dir + "/keep.txt") == kPrecious);
  }
}

TEST_CASE("messages: token ids beyond the model's vocabulary name the shard, the position and the step", "[files]") {
  const std::string dir = scratch_dir("messages_token_ids");
  std::vector<int64_t> ids(400);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i % 250);
  ids[300] = 300;  // beyond model.vocab = 257; the shard records no vocabulary
  zf::write_token_shard(dir + "/bad.bin", ids, 0);
  auto run = run_command(tiny_run(dir, 20) + "--set data.type=tokens --set data.path=" + dir +
                         "/bad.bin --set data.shuffle=false --set run.output_dir=" + dir + "/out");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("step ") && Catch::Contains(dir + "/bad.bin: id 300 at position 300") &&
                             Catch::Contains("vocabulary size 257"));
}

TEST_CASE("messages: too little data, a wrong tokenizer_config.json and a resume of something not a checkpoint",
          "[files]") {
  const std::string dir = scratch_dir("messages_inputs");
  write_text(dir + "/one.txt", "a");
  auto tiny = run_command(tiny_run(dir) + "--set data.path=" + dir + "/one.txt --set run.output_dir=" + dir + "/o1");
  INFO(tiny.output);
  CHECK(tiny.exit_code == 1);
  CHECK_THAT(tiny.output, Catch::Contains("too few to train on"));
  CHECK_THAT(tiny.output, !Catch::Contains("at most 0"));

  const std::string tokenizer = dir + "/tokenizer";
  fs::create_directories(tokenizer);
  fs::copy_file(zf::test::source_dir() + "/tests/fixtures/hf/gpt2_tokenizer/tokenizer.json", tokenizer + "/tokenizer.json");
  write_text(tokenizer + "/tokenizer_config.json", "{\"eos_token\": 5}");
  auto config = run_command(tiny_run(dir) + "--set data.tokenizer=hf --set data.tokenizer_path=" + tokenizer +
                            " --set model.vocab=0 --set run.output_dir=" + dir + "/o2");
  INFO(config.output);
  CHECK(config.exit_code == 1);
  CHECK_THAT(config.output, Catch::Contains("tokenizer_config.json: \"eos_token\" must be a token's text"));
  CHECK_THAT(config.output, !Catch::Contains("internal error"));

  auto first = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/run --set checkpoint.export_hf=" + dir +
                           "/hf");
  REQUIRE(first.exit_code == 0);
  for (const auto &[resume, expected] : std::vector<std::pair<std::string, std::string>>{
           {dir + "/run", "is a run's output directory, not a checkpoint"},
           {dir + "/hf", "is a Hugging Face model directory, not a checkpoint"},
           {dir + "/run/checkpoints", "is a directory of checkpoints, not one checkpoint"}}) {
    auto outcome = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + dir + "/o3 --set checkpoint.resume=" + resume);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains(expected));
  }
}

TEST_CASE("messages: convert refuses what run would, checkpoint verify names a file and a link loop", "[files]") {
  const std::string dir = scratch_dir("messages_cli");
  write_text(dir + "/ds.json", "{\"train_micro_batch_size_per_gpu\": -4}");
  auto convert = run_command(zf::test::zfcore() + " convert " + dir + "/ds.json");
  INFO(convert.output);
  CHECK(convert.exit_code == 1);
  CHECK_THAT(convert.output, Catch::Contains("train.micro_batch = -4"));
  CHECK_THAT(convert.output, !Catch::Contains("[train]"));  // no TOML written

  write_text(dir + "/file", "x");
  fs::create_symlink(dir + "/loop", dir + "/loop");
  auto file = run_command(zf::test::zfcore() + " checkpoint verify " + dir + "/file");
  INFO(file.output);
  CHECK(file.exit_code == 1);
  CHECK_THAT(file.output, Catch::Contains("is a file, not a directory"));
  auto loop = run_command(zf::test::zfcore() + " checkpoint verify " + dir + "/loop");
  INFO(loop.output);
  CHECK(loop.exit_code == 1);
  CHECK_THAT(loop.output, Catch::Contains("a link loop"));
}

// ---- a recount of the red-team's cases (issue 45): what was left ------------------------------

TEST_CASE("inputs: a model's file that links outside its directory is refused, its bytes never shown", "[files]") {
  const std::string dir = scratch_dir("inputs_links_out");
  const std::string secret = "SECRET-LINE-1: root:x:0:0:root:/root:/bin/bash\n";
  write_text(dir + "/secret.txt", secret);
  auto first = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/run --set checkpoint.export_hf=" + dir +
                           "/hf");
  REQUIRE(first.exit_code == 0);
  // model.safetensors of init_from as a link to a file outside the model's directory.
  fs::create_directories(dir + "/model");
  fs::copy_file(dir + "/hf/config.json", dir + "/model/config.json");
  fs::create_symlink(dir + "/secret.txt", dir + "/model/model.safetensors");
  auto weights = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/o1 --set model.init_from=" + dir + "/model");
  INFO(weights.output);
  CHECK(weights.exit_code == 1);
  CHECK_THAT(weights.output, Catch::Contains("model/model.safetensors leads outside") &&
                                 Catch::Contains("copy the file there"));
  // tokenizer.json of a tokenizer directory, the same.
  fs::create_directories(dir + "/tokenizer");
  fs::create_symlink(dir + "/secret.txt", dir + "/tokenizer/tokenizer.json");
  auto tokenizer = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/o2 --set data.tokenizer=hf "
                               "--set model.vocab=0 --set data.tokenizer_path=" + dir + "/tokenizer");
  INFO(tokenizer.output);
  CHECK(tokenizer.exit_code == 1);
  CHECK_THAT(tokenizer.output, Catch::Contains("tokenizer/tokenizer.json leads outside"));
  // A file named directly is the user's choice, but a file that is no JSON shows no byte of it.
  auto named = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/o3 --set data.tokenizer=hf "
                           "--set model.vocab=0 --set data.tokenizer_path=" + dir + "/secret.txt");
  INFO(named.output);
  CHECK(named.exit_code == 1);
  CHECK_THAT(named.output, Catch::Contains("secret.txt: not valid JSON"));
  for (const auto *outcome : {&weights, &tokenizer, &named})
    CHECK_THAT(outcome->output, !Catch::Contains("SECRET") && !Catch::Contains("root:x"));
}

TEST_CASE("runs: a FIFO where the tensorboard directory goes is named as such", "[files]") {
  const std::string dir = scratch_dir("runs_fifo_tensorboard"), out = dir + "/out";
  fs::create_directories(out);
  REQUIRE(mkfifo((out + "/tensorboard").c_str(), 0644) == 0);
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + out + " --set run.tensorboard=true");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains(out + "/tensorboard is a FIFO (named pipe), not a directory: move it away"));
  CHECK_THAT(run.output, !Catch::Contains("internal error"));
}

TEST_CASE("bench: a row named like zfcore's own files is refused", "[files]") {
  const std::string dir = scratch_dir("bench_reserved_rows");
  auto outcome = run_command("timeout 60 " + zf::test::zfcore() + " bench convergence --device cpu --num-steps 2 "
                             "--rows '.zfcore-owner:none' --output-dir " + dir);
  INFO(outcome.output);
  CHECK(outcome.exit_code == 2);
  CHECK_THAT(outcome.output, Catch::Contains("\".zfcore-owner\" starts with \".zfcore\", which zfcore reserves"));
  CHECK_THAT(outcome.output, !Catch::Contains("internal error"));
}

TEST_CASE("runs: a resumed step log is read line by line, and a row of another type or past 1 MiB is named, not fatal",
          "[files]") {
  const std::string dir = scratch_dir("runs_step_log_rows"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out).exit_code == 0);
  std::string log = read_text(out + "/steps.jsonl");
  const size_t loss = log.find("\"loss\":");
  REQUIRE(loss != std::string::npos);
  log.insert(loss + 7, "\"high\",\"was\":");  // "loss":"high" on line 1
  write_text(out + "/steps.jsonl", log);
  auto resumed = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains(out + "/steps.jsonl:1: not a step row zfcore writes"));
  CHECK_THAT(resumed.output, !Catch::Contains("internal error"));
  // A step log of 768 MiB in one line (a sparse file) is read in bounded memory: the run's address
  // space (about 500 MiB without it) is limited to less than both together, and the line is left
  // out with a note.
  fs::resize_file(out + "/steps.jsonl", uint64_t(768) << 20);
  auto huge = run_command("ulimit -v 1000000; " + tiny_run(dir, 4) + "--set run.output_dir=" + out);
  INFO(huge.output);
  CHECK(huge.exit_code == 0);
  CHECK_THAT(huge.output, Catch::Contains("longer than 1048576 bytes are not rows zfcore wrote"));
  CHECK(fs::file_size(out + "/steps.jsonl") < (uint64_t(1) << 20));
}

TEST_CASE("export: OUT_DIR inside the checkpoint directory, a file as OUT_DIR and a directory of checkpoints as "
          "CHECKPOINT are refused with the argument named", "[files]") {
  const std::string dir = scratch_dir("export_arguments"), ck = dir + "/run/checkpoints";
  auto first = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/run --set checkpoint.every=1");
  REQUIRE(first.exit_code == 0);
  const std::string step = ck + "/step-00000002", zfcore = "timeout 120 " + zf::test::zfcore();
  for (const std::string &into : {step, ck + "/hf", ck}) {
    auto outcome = run_command(zfcore + " export " + step + " " + into);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains("zfcore export: OUT_DIR " + into + " is ") &&
                                   Catch::Contains("the checkpoint directory") && Catch::Contains("checkpoints-hf"));
  }
  CHECK_FALSE(fs::exists(step + "/config.json"));
  CHECK_FALSE(fs::exists(ck + "/hf"));
  CHECK(run_command(zf::test::zfcore() + " checkpoint verify " + step).exit_code == 0);
  write_text(dir + "/file.txt", kPrecious);
  auto file = run_command(zfcore + " export " + step + " " + dir + "/file.txt");
  INFO(file.output);
  CHECK(file.exit_code == 1);
  CHECK_THAT(file.output, Catch::Contains("zfcore export: OUT_DIR " + dir + "/file.txt exists and is not a directory"));
  CHECK_THAT(file.output, !Catch::Contains("checkpoint.export_hf"));
  CHECK(read_text(dir + "/file.txt") == kPrecious);
  for (const std::string &command : {" export " + ck + " " + dir + "/hf", " checkpoint info " + ck}) {
    auto outcome = run_command(zfcore + command);
    INFO(outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains("is a directory of checkpoints, not one checkpoint: name one of its "
                                               "checkpoints, e.g. the newest, " + step));
  }
  // checkpoint.export_hf of a run, the same rule, named where it is set.
  auto run = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/run2 --set checkpoint.export_hf=" + dir +
                         "/run2/checkpoints/hf");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("checkpoint.export_hf = \"" + dir + "/run2/checkpoints/hf\" is inside the "
                                         "checkpoint directory"));
}

TEST_CASE("eval: a run's output directory without checkpoints/ is named as such, no checkpoints/ invented",
          "[files]") {
  const std::string dir = scratch_dir("eval_run_directory");
  auto first = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/run --set checkpoint.dir=" + dir + "/ck");
  REQUIRE(first.exit_code == 0);
  auto eval = run_command("timeout 120 " + zf::test::zfcore() + " eval " + zf::test::source_dir() +
                          "/examples/quickstart.toml --set model.hidden=32 --set model.layers=1 --set model.heads=2 "
                          "--set model.max_seq=32 --set data.seq_len=32 --set data.path=" + dir + "/train.txt "
                          "--set checkpoint.resume=" + dir + "/run");
  INFO(eval.output);
  CHECK(eval.exit_code == 1);
  CHECK_THAT(eval.output, Catch::Contains("is a run's output directory, not a checkpoint, and holds no checkpoints/"));
  CHECK_THAT(eval.output, !Catch::Contains(dir + "/run/checkpoints"));
}

TEST_CASE("runs: a link at OUTPUT_DIR/checkpoints is refused like one at tensorboard, the directory it points to "
          "left empty", "[files]") {
  const std::string dir = scratch_dir("runs_checkpoints_link"), out = dir + "/out";
  fs::create_directories(out);
  fs::create_directories(dir + "/elsewhere");
  fs::create_directory_symlink(dir + "/elsewhere", out + "/checkpoints");
  auto run = run_command(tiny_run(dir) + "--set run.output_dir=" + out + " --set checkpoint.every=1");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains(out + "/checkpoints is a symbolic link (to " + dir + "/elsewhere)") &&
                             Catch::Contains("set checkpoint.dir = \"" + dir + "/elsewhere\""));
  CHECK(fs::is_empty(dir + "/elsewhere"));
  // The directory named by checkpoint.dir is the user's choice: written there.
  auto chosen = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/out2 --set checkpoint.dir=" + dir +
                            "/elsewhere");
  INFO(chosen.output);
  CHECK(chosen.exit_code == 0);
  CHECK(fs::exists(dir + "/elsewhere/step-00000002/checkpoint.json"));
}

TEST_CASE("export: zfcore export writes only OUT_DIR, no run directory, and does not talk like a run", "[files]") {
  const std::string dir = scratch_dir("export_no_run_dir");
  auto trained = run_command(tiny_run(dir) + "--set run.output_dir=" + dir + "/out");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  fs::create_directories(dir + "/here");
  // The run's config is the example with --set overrides: the export is given the model's.
  auto exported = run_command("cd " + dir + "/here && " + zf::test::zfcore() + " export " + dir +
                              "/out/checkpoints/step-00000002 " + dir + "/hf --set model.hidden=32 --set "
                              "model.layers=1 --set model.heads=2 --set model.max_seq=32 --set data.seq_len=32 "
                              "--set data.path=" + dir + "/train.txt --set sample.tokens=0");
  INFO(exported.output);
  CHECK(exported.exit_code == 0);
  CHECK(fs::exists(dir + "/hf/model.safetensors"));
  CHECK(fs::is_empty(dir + "/here"));  // no runs/quickstart/ with a lock in it
  CHECK(exported.output.find("the run is complete") == std::string::npos);
  CHECK(exported.output.find("checkpoints:") == std::string::npos);
}

TEST_CASE("messages: a text whose tokenizer gives ids past the model's vocabulary names the file, the token and the "
          "keys, before step 1", "[files]") {
  const std::string dir = scratch_dir("messages_text_vocab");
  auto run = run_command(tiny_run(dir) + "--set model.vocab=100 --set run.output_dir=" + dir + "/out");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  // "Line 0: ...": 'i' (105) is the first byte past 100, the second token.
  CHECK_THAT(run.output, Catch::Contains(dir + "/train.txt, token 1 (\"i\", id 105 of tokenizer byte") &&
                             Catch::Contains("model.vocab = 100") && Catch::Contains("(model.vocab = 257)"));
  CHECK(run.output.find("step 1") == std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/out/steps.jsonl"));
}
