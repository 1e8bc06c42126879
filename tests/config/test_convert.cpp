// zfcore convert: a DeepSpeed config becomes zfcore TOML that validates and trains to the
// param_digest of its hand-written twin (and `zfcore run ds.json` does the same); keys without a
// zfcore key are listed (by convert, run and validate alike), unknown keys are errors at their
// line with the nearest key suggested. Every config of tests/config/deepspeed/ (the shapes
// DeepSpeed's docs and examples use) converts, validates and runs.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string &name) { return test::source_dir() + "/tests/config/deepspeed/" + name; }

// linear_stack's model and data, added on the command line (a DeepSpeed config has neither).
const std::string kModelAndData =
    " --set model.type=linear_stack --set model.hidden=256 --set model.layers=4 --set data.type=random "
    "--set data.samples=512 --set run.progress=off --set train.steps=6 --set optimizer.threads=1 ";

// The lines of `zfcore convert`'s notes (the comments "#   key: what happens").
std::vector<std::string> note_lines(const std::string &toml) {
  std::vector<std::string> notes;
  std::stringstream lines(toml);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("#   ", 0) == 0) notes.push_back(line.substr(4));
  return notes;
}

std::vector<nlohmann::json> steps_of(const std::string &run_dir) {
  std::vector<nlohmann::json> steps;
  std::stringstream lines(test::read_text(run_dir + "/steps.jsonl"));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) steps.push_back(nlohmann::json::parse(line));
  return steps;
}

}  // namespace

TEST_CASE("convert: DeepSpeed's ZenFlow example config becomes TOML that validates", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_zenflow");
  // The zf_config.json of DeepSpeed's ZenFlow Llama-2 fine-tuning example.
  test::Outcome converted =
      test::run_command(test::zfcore() + " convert " + fixture("zenflow_llama2_zf_config.json") + " > " + dir + "/train.toml");
  INFO(converted.output);
  REQUIRE(converted.exit_code == 0);
  std::string toml = test::read_text(dir + "/train.toml");
  INFO(toml);
  for (const char *line : {"plugin = \"zero2\"", "plugin = \"cpu_optimizer\"", "pin_memory = true", "[zenflow]",
                           "topk_ratio = 0.1", "update_interval = 4", "overlap_step = true", "schedule = \"deepspeed\"", "dtype = \"bfloat16\"",
                           "plugin = \"cpu_adam\"", "lr = 2e-05", "beta2 = 0.999", "clip_grad_norm = 1.0",
                           "global_batch = 8", "#   zero_allow_untested_optimizer: ignored"})
    CHECK(toml.find(line) != std::string::npos);
  test::Outcome valid = test::run_command(test::zfcore() + " validate " + dir + "/train.toml" + kModelAndData);
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
}

TEST_CASE("convert: a converted config, and the JSON run as is, train to the hand-written twin's param_digest",
          "[config][convert]") {
  std::string dir = test::scratch_dir("convert_twin");
  std::string json = test::write_file(dir, "ds.json", R"({
    "train_micro_batch_size_per_gpu": 32,
    "gradient_accumulation_steps": 2,
    "gradient_clipping": 0.5,
    "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 5000,
                          "overlap_comm": true},
    "optimizer": {"type": "Adam", "params": {"lr": 3e-3, "betas": [0.8, 0.99], "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 2, "total_num_steps": 6,
                                                       "cos_min_ratio": 0.2}}
  })");
  REQUIRE(test::run_command(test::zfcore() + " convert " + json + " > " + dir + "/converted.toml").exit_code == 0);
  // DeepSpeed's warm-up is logarithmic unless the config says linear, its steps counted as DeepSpeed's.
  std::string twin = test::write_file(dir, "twin.toml",
                           "[train]\nmicro_batch = 32\ngrad_accum = 2\nclip_grad_norm = 0.5\nlr_schedule = \"cosine\"\n"
                           "lr_schedule_steps = \"deepspeed\"\nlr_decay_steps = 6\n"
                           "warmup_steps = 2\nwarmup_type = \"log\"\nmin_lr_ratio = 0.2\n[optimizer]\n"
                           "plugin = \"cpu_adam\"\nlr = 3e-3\nbeta1 = 0.8\nbeta2 = 0.99\nweight_decay = 0.1\n[stage]\n"
                           "plugin = \"zero1\"\nreduce_bucket_size = 5000\n[offload]\nplugin = \"cpu_optimizer\"\n");
  std::string digests[2];
  const std::string configs[2] = {dir + "/converted.toml", twin};
  for (int i = 0; i < 2; ++i) {
    test::Outcome run = test::run_command(test::zfcore() + " run " + configs[i] + kModelAndData +
                                          "--set run.output_dir=" + dir + "/out" + std::to_string(i));
    INFO(test::read_text(configs[i]) << run.output);
    REQUIRE(run.exit_code == 0);
    digests[i] = test::json_field(test::read_text(dir + "/out" + std::to_string(i) + "/summary.json"), "param_digest");
  }
  CHECK(digests[0].size() == 16);
  CHECK(digests[0] == digests[1]);
  // zfcore run takes the JSON itself, through the same conversion.
  test::Outcome direct = test::run_command(test::zfcore() + " run " + json + kModelAndData + "--set run.output_dir=" +
                                           dir + "/out_json");
  INFO(direct.output);
  REQUIRE(direct.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/out_json/summary.json"), "param_digest") == digests[0]);
}

TEST_CASE("convert: every DeepSpeed example config converts, validates and runs", "[config][convert]") {
  // A config that keeps the optimizer on the GPU converts to ["gpu_adam", "cpu_adam"]: it runs on a
  // build without gpu_adam as it is.
  int count = 0;
  for (const auto &entry : fs::directory_iterator(test::source_dir() + "/tests/config/deepspeed")) {
    if (entry.path().extension() != ".json") continue;
    ++count;
    const std::string json = entry.path().string(), name = entry.path().stem().string();
    INFO(name);
    std::string dir = test::scratch_dir("convert_example_" + name);
    test::Outcome converted = test::run_command(test::zfcore() + " convert " + json);
    INFO(converted.output);
    REQUIRE(converted.exit_code == 0);
    std::string local = kModelAndData + "--set train.steps=2 --set run.output_dir=" + dir + "/out ";
    if (converted.output.find("plugin = \"nvme\"") != std::string::npos) local += "--set offload.path=" + dir + "/nvme ";
    // validate and run print the notes convert writes, every one of them.
    test::Outcome valid = test::run_command(test::zfcore() + " validate " + json + local);
    INFO(valid.output);
    CHECK(valid.exit_code == 0);
    for (const std::string &note : note_lines(converted.output)) CHECK_THAT(valid.output, Catch::Contains("  " + note));
    test::Outcome run = test::run_command(test::zfcore() + " run " + json + local);
    INFO(run.output);
    CHECK(run.exit_code == 0);
    for (const std::string &note : note_lines(converted.output)) CHECK_THAT(run.output, Catch::Contains("  " + note));
  }
  CHECK(count == 8);
}

TEST_CASE("convert: ZeRO-3 + NVMe with counts written 1e9 runs as converted, train_batch_size sets grad_accum",
          "[config][convert]") {
  std::string dir = test::scratch_dir("convert_zero3_nvme");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + fixture("zero3_nvme.json"));
  INFO(converted.output);
  REQUIRE(converted.exit_code == 0);
  // Integral floats are integers; fp16 off is fp32; each aio key is mapped or noted.
  for (const char *line : {"max_live_parameters = 1000000000\n", "prefetch_bucket_size = 10000000\n",
                           "param_persistence_threshold = 100000\n", "reduce_bucket_size = 10000000\n",
                           "global_batch = 16\n", "micro_batch = 2\n", "dtype = \"float32\"\n", "queue_depth = 8\n",
                           "#   aio.block_size: ignored", "#   aio.thread_count: ignored", "#   aio.single_submit: ignored",
                           "#   aio.overlap_events: ignored", "#   fp16.loss_scale: ignored: fp16 is off",
                           "offload_params = true\n",
                           "#   zero_optimization.offload_param.device: \"nvme\" is host memory here"})
    CHECK_THAT(converted.output, Catch::Contains(line));
  CHECK_THAT(converted.output, !Catch::Contains("e+") && !Catch::Contains("1000000000.0"));

  // 16 = 2 x grad_accum x 1 rank: grad_accum 8, as DeepSpeed derives it.
  test::Outcome run = test::run_command(test::zfcore() + " run " + fixture("zero3_nvme.json") + kModelAndData +
                                        "--set train.steps=2 --set offload.path=" + dir + "/nvme --set run.output_dir=" +
                                        dir + "/out");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::string summary = test::read_text(dir + "/out/summary.json");
  CHECK(test::json_field(summary, "samples_per_step") == "16");
  // offload_param: the parameters' shard in pinned host memory, the state on disk.
  CHECK(test::ledger_bytes(summary, "memory_bytes", "pinned.params.shard") > 0);
  CHECK(test::ledger_bytes(summary, "memory_bytes", "nvme.nvme.state") > 0);

  // A true fraction where DeepSpeed wants a count is an error at its line and column.
  std::string fraction = test::write_file(dir, "fraction.json", "{\n  \"zero_optimization\": {\n    \"stage\": 3,\n"
                                                     "    \"stage3_max_live_parameters\": 1.5e3,\n"
                                                     "    \"stage3_prefetch_bucket_size\": 1000.5\n  }\n}\n");
  test::Outcome bad = test::run_command(test::zfcore() + " convert " + fraction);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Catch::Contains(fraction + ":5:5: zero_optimization.stage3_prefetch_bucket_size = 1000.5 "
                                                    "must be a whole number"));
}

TEST_CASE("convert: train_batch_size = micro x accum x ranks, the ranks taken from the launch", "[config][convert][mpi]") {
  std::string dir = test::scratch_dir("convert_global_batch");
  auto config = [&](const std::string &name, const std::string &batch) {
    return test::write_file(dir, name, "{" + batch + R"(, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})");
  };
  // The oracle: a run with grad_accum written out trains to the same parameters.
  std::string derived = config("derived.json", R"("train_batch_size": 16, "train_micro_batch_size_per_gpu": 2)");
  std::string written = config("written.json", R"("train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8)");
  std::string digests[2];
  for (int i = 0; i < 2; ++i) {
    std::string out = dir + "/one" + std::to_string(i);
    test::Outcome run = test::run_command(test::zfcore() + " run " + (i ? written : derived) + kModelAndData +
                                          "--set train.steps=2 --set run.output_dir=" + out);
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    digests[i] = test::json_field(test::read_text(out + "/summary.json"), "param_digest");
  }
  CHECK(digests[0] == digests[1]);

  // On 2 ranks the same config accumulates 4 micro-batches.
  test::Outcome two = test::run_command(test::mpirun(2) + test::zfcore() + " run " + derived + kModelAndData +
                                        "--set train.steps=1 --set run.output_dir=" + dir + "/two");
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/two/summary.json"), "samples_per_step") == "16");
  CHECK(test::json_field(test::read_text(dir + "/two/summary.json"), "world_size") == "2");

  // An inconsistent triple is an error naming all three, on 1 rank and on 2.
  std::string triple = config("triple.json", R"("train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                                                 "gradient_accumulation_steps": 8)");
  test::Outcome on_two = test::run_command(test::mpirun(2) + test::zfcore() + " run " + triple + kModelAndData +
                                           "--set run.output_dir=" + dir + "/triple");
  CHECK(on_two.exit_code != 0);
  CHECK_THAT(on_two.output, Catch::Contains("train.global_batch = 16 must equal train.micro_batch x train.grad_accum "
                                            "x ranks = 2 x 8 x 2 ranks = 32") &&
                                Catch::Contains("train_batch_size = train_micro_batch_size_per_gpu x "
                                                "gradient_accumulation_steps x ranks"));
  std::string odd = config("odd.json", R"("train_batch_size": 15, "train_micro_batch_size_per_gpu": 2)");
  for (const std::string &command : {" run ", " validate "}) {
    test::Outcome bad = test::run_command(test::zfcore() + command + odd + kModelAndData);
    INFO(command << bad.output);
    CHECK(bad.exit_code == 1);
    CHECK_THAT(bad.output, Catch::Contains("train.global_batch = 15 is not a multiple of train.micro_batch"));
  }
}

TEST_CASE("convert: DeepSpeed's scheduler defaults: log warm-up of 1000 steps, cos_min_ratio 1e-4, WarmupLR's peak "
          "the optimizer's lr",
          "[config][convert]") {
  std::string dir = test::scratch_dir("convert_scheduler");
  test::Outcome cosine = test::run_command(
      test::zfcore() + " convert " +
      test::write_file(dir, "cosine.json", R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100}}})"));
  INFO(cosine.output);
  REQUIRE(cosine.exit_code == 0);
  for (const char *line : {"lr_schedule = \"cosine\"\n", "warmup_steps = 1000\n", "warmup_type = \"log\"\n",
                           "min_lr_ratio = 0.0001\n", "steps = 100\n"})
    CHECK_THAT(cosine.output, Catch::Contains(line));
  // WarmupLR's peak is warmup_max_lr, which replaces the optimizer's lr; without it, the optimizer's lr
  // (DeepSpeed since its WarmupLR inherits the optimizer's lr).
  test::Outcome warmup = test::run_command(
      test::zfcore() + " convert " +
      test::write_file(dir, "warmup.json", R"({"optimizer": {"type": "Adam", "params": {"lr": 5e-5}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_type": "linear"}}})"));
  INFO(warmup.output);
  REQUIRE(warmup.exit_code == 0);
  for (const char *line : {"lr = 5e-05\n", "warmup_type = \"linear\"\n", "warmup_steps = 10\n",
                           "lr_schedule_steps = \"deepspeed\"\n"})
    CHECK_THAT(warmup.output, Catch::Contains(line));
  CHECK_THAT(warmup.output, !Catch::Contains("replaced by"));
  test::Outcome peak = test::run_command(
      test::zfcore() + " convert " +
      test::write_file(dir, "peak.json", R"({"optimizer": {"type": "Adam", "params": {"lr": 5e-5}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.002}}})"));
  CHECK_THAT(peak.output, Catch::Contains("lr = 0.002\n") &&
                              Catch::Contains("#   optimizer.params.lr: replaced by the scheduler's warmup_max_lr 0.002"));

  // The log warm-up as trained, DeepSpeed's: step s runs at iteration i = s - 2, the lr at step 1 is the
  // warm-up's start (0), then lr x log(i + 1) / log(warmup_num_steps) until i reaches warmup_num_steps.
  test::Outcome run = test::run_command(test::zfcore() + " run " + test::write_file(dir, "log.json", R"({
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
      "zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 4}}})") +
                                        kModelAndData + "--set run.output_dir=" + dir + "/out");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::vector<nlohmann::json> steps = steps_of(dir + "/out");
  REQUIRE(steps.size() == 6);
  for (int s = 1; s <= 6; ++s) {
    INFO("step " << s);
    const int i = s - 2;
    double expected = i < 0 ? 0.0 : 0.01 * (i < 4 ? std::log(i + 1.0) / std::log(4.0) : 1.0);
    CHECK(steps[s - 1]["lr"].get<double>() == Approx(expected).epsilon(1e-6).margin(1e-12));
  }

  test::Outcome bad = test::run_command(
      test::zfcore() + " convert " +
      test::write_file(dir, "bad.json", R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_type": "exp",
                                                                                  "total_num_steps": 9}}})"));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Catch::Contains("scheduler.params.warmup_type = \"exp\": DeepSpeed's warm-up types are log and linear"));
}

TEST_CASE("convert: run and validate on a DeepSpeed JSON without a model or data say so", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_no_model");
  std::string json = test::write_file(dir, "ds.json", R"({"train_micro_batch_size_per_gpu": 4})");
  for (const std::string &command : {" run ", " validate "}) {
    test::Outcome none = test::run_command(test::zfcore() + command + json + " --set run.output_dir=" + dir + "/out");
    INFO(none.output);
    CHECK(none.exit_code == 1);
    CHECK_THAT(none.output, Catch::Contains(json + ": a DeepSpeed config names no model and no data") &&
                                Catch::Contains("--set model.preset=gpt2") && Catch::Contains("zfcore convert"));
    CHECK(!fs::exists(dir + "/out/summary.json"));
  }
  test::Outcome no_data = test::run_command(test::zfcore() + " validate " + json + " --set model.preset=gpt2");
  CHECK(no_data.exit_code == 1);
  CHECK_THAT(no_data.output, Catch::Contains("names no data"));
}

TEST_CASE("convert: the converted TOML without a model is refused as the JSON is, and takes the model keys "
          "appended at its end", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_no_model_toml");
  std::string json = test::write_file(dir, "ds.json", R"({"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}})");
  const std::string toml = dir + "/train.toml";
  REQUIRE(test::run_command(test::zfcore() + " convert " + json + " > " + toml).exit_code == 0);
  const std::string converted = test::read_text(toml);
  for (const std::string &command : {" run ", " validate "}) {
    test::Outcome none = test::run_command(test::zfcore() + command + toml + " --set run.output_dir=" + dir + "/out");
    INFO(none.output);
    CHECK(none.exit_code == 1);
    CHECK_THAT(none.output, Catch::Contains(toml + ": converted from a DeepSpeed config by zfcore convert, it names no "
                                                   "model and no data") &&
                                Catch::Contains("[model] table") && Catch::Contains("[data] table"));
    CHECK(!fs::exists(dir + "/out/summary.json"));
  }
  // A second [model] table is a TOML error that says where the first one is.
  test::write_file(dir, "twice.toml", converted + "\n[model]\ntype = \"linear_stack\"\n");
  test::Outcome twice = test::run_command(test::zfcore() + " validate " + dir + "/twice.toml");
  INFO(twice.output);
  CHECK(twice.exit_code == 1);
  CHECK_THAT(twice.output, Catch::Contains("[model] is already at line") && Catch::Contains("put these keys in that "
                                                                                           "table"));
  // The model's keys appended at the end land in its [model] table (the last one), beside dtype.
  test::write_file(dir, "named.toml", converted + "type = \"linear_stack\"\nhidden = 32\nlayers = 2\n[data]\ntype = \"random\"\n"
                                       "samples = 64\n");
  test::Outcome named = test::run_command(test::zfcore() + " run " + dir + "/named.toml --set train.steps=2 "
                                          "--set run.progress=off --set run.output_dir=" + dir + "/named");
  INFO(named.output);
  CHECK(named.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/named/summary.json"), "steps") == "2");
}

TEST_CASE("convert: DeepSpeed key typos are errors at their line with the nearest key", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_typos");
  struct Case {
    std::string json, message;
  };
  for (const Case &c : {
           Case{"{\n  \"train_micro_batch_size_per_gpu\": 4,\n  \"zero_optimizaton\": {\"stage\": 2}\n}\n",
                ":3:3: \"zero_optimizaton\" is not a DeepSpeed config key zfcore knows; did you mean "
                "'zero_optimization'?"},
           Case{"{\"zero_optimization\": {\n    \"stage\": 3,\n    \"offload_optimizer\": {\"devcie\": \"cpu\"}}}",
                ":3:27: \"zero_optimization.offload_optimizer.devcie\" is not an offload_optimizer key zfcore knows; "
                "did you mean 'device'?"},
           Case{"{\"scheduler\": {\"type\": \"WarmupLR\",\n \"params\": {\"warmup_num_step\": 10}}}",
                ":2:13: \"scheduler.params.warmup_num_step\" is not a WarmupLR parameter zfcore knows; did you mean "
                "'warmup_num_steps'?"},
           Case{"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"weight_decy\": 0.1}}}",
                ":1:44: \"optimizer.params.weight_decy\" is not an optimizer parameter zfcore knows; did you mean "
                "'weight_decay'?"},
           Case{"{\"zero_optimization\": {\"stage\": 3, \"stage3_max_live_parameter\": 1e9}}",
                "did you mean 'stage3_max_live_parameters'?"},
           Case{R"({"train_micro_batch": 4})", "\"train_micro_batch\" is not a DeepSpeed config key"},
           Case{R"({"zero_optimization": {"stage": 5}})", "zero_optimization.stage = 5"},
           Case{R"({"optimizer": {"type": "SGD"}})", "optimizer.type = \"SGD\""},
           Case{R"({"zero_optimization": {"zenflow": {"topk_ratio": 0.1}}})", "needs zero_optimization.offload_optimizer"},
           Case{R"({"scheduler": {"type": "OneCycle"}})", "scheduler.type = \"OneCycle\""},
           Case{R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})", "bf16 and fp16 are both enabled"},
           Case{R"([1, 2])", "must be an object"}}) {
    std::string file = test::write_file(dir, "bad.json", c.json);
    test::Outcome outcome = test::run_command(test::zfcore() + " convert " + file);
    INFO(c.json << "\n" << outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK_THAT(outcome.output, Catch::Contains(file) && Catch::Contains(c.message));
  }
}

TEST_CASE("convert: nvme offload maps to nvme (with parameter offload: offload_params), parameter offload to cpu_full", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_offload");
  std::string nvme = test::write_file(dir, "nvme.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 4},
      "stage3_prefetch_bucket_size": 1000, "offload_param": {"device": "cpu"}}, "aio": {"queue_depth": 16}})");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + nvme);
  INFO(converted.output);
  REQUIRE(converted.exit_code == 0);
  for (const char *line : {"plugin = \"nvme\"", "path = \"/local_nvme\"", "queue_depth = 16", "plugin = \"zero3\"",
                           "prefetch_bucket_size = 1000", "plugin = \"cpu_adam\"",
                           "offload_params = true", "zero_optimization.offload_optimizer.buffer_count: ignored"})
    CHECK(converted.output.find(line) != std::string::npos);

  std::string params = test::write_file(dir, "params.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu", "pin_memory": true, "buffer_count": 5}},
      "aio": {"queue_depth": 16}})");
  test::Outcome full = test::run_command(test::zfcore() + " convert " + params);
  INFO(full.output);
  REQUIRE(full.exit_code == 0);
  for (const char *line : {"plugin = \"cpu_full\"", "pin_memory = true", "plugin = \"zero3\"", "plugin = \"cpu_adam\"",
                           "zero_optimization.offload_param.buffer_count: ignored",
                           "aio.queue_depth: ignored: applies to NVMe offload only"})
    CHECK(full.output.find(line) != std::string::npos);
  CHECK(full.output.find("queue_depth = 16") == std::string::npos);
}

TEST_CASE("convert: offload_optimizer.ratio (stage 3) is offload.ratio, and a note under offload_param", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_ratio");
  std::string json = test::write_file(dir, "ds.json", R"({"train_micro_batch_size_per_gpu": 32,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + json + " > " + dir + "/train.toml");
  REQUIRE(converted.exit_code == 0);
  std::string toml = test::read_text(dir + "/train.toml");
  INFO(toml);
  CHECK(toml.find("ratio = 0.3") != std::string::npos);
  test::Outcome run = test::run_command(test::zfcore() + " run " + dir + "/train.toml" + kModelAndData +
                                        "--set run.output_dir=" + dir + "/out");
  INFO(run.output);
  CHECK(run.exit_code == 0);
  // With offload_param the parameters live in host memory (cpu_full): the whole shard is updated there.
  json = test::write_file(dir, "param.json", R"({"train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage": 3,
    "offload_optimizer": {"device": "cpu", "ratio": 0.3}, "offload_param": {"device": "cpu"}}})");
  converted = test::run_command(test::zfcore() + " convert " + json + " > " + dir + "/param.toml");
  REQUIRE(converted.exit_code == 0);
  toml = test::read_text(dir + "/param.toml");
  CHECK(toml.find("plugin = \"cpu_full\"") != std::string::npos);
  CHECK(toml.find("ratio = ") == std::string::npos);
  CHECK(toml.find("offload_optimizer.ratio: ignored: with offload_param") != std::string::npos);
}

TEST_CASE("convert: a DeepSpeed zenflow section without topk_ratio keeps DeepSpeed's 0.1, not zfcore's auto",
          "[config][convert]") {
  std::string dir = test::scratch_dir("convert_topk");
  std::string json = test::write_file(dir, "ds.json", R"({"train_micro_batch_size_per_gpu": 32,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"update_interval": 4}}})");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + json + " > " + dir + "/train.toml");
  REQUIRE(converted.exit_code == 0);
  std::string toml = test::read_text(dir + "/train.toml");
  INFO(toml);
  CHECK(toml.find("topk_ratio = 0.1") != std::string::npos);
  CHECK(toml.find("schedule = \"deepspeed\"") != std::string::npos);
  // DeepSpeed's other defaults where zfcore's differ: overlap_step false (update_interval as written).
  CHECK(toml.find("overlap_step = false") != std::string::npos);
  CHECK(toml.find("update_interval = 4") != std::string::npos);
  test::Outcome bare = test::run_command(test::zfcore() + " convert " + test::write_file(dir, "bare.json", R"({
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {}}})"));
  CHECK_THAT(bare.output, Catch::Contains("update_interval = \"auto\"\n") && Catch::Contains("overlap_step = false\n"));
}
