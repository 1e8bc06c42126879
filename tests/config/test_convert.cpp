// zfcore convert: a DeepSpeed config becomes zfcore TOML that validates and trains to the
// param_digest of its hand-written twin (and `zfcore run ds.json` does the same); keys without a
// zfcore key are listed, unknown keys are errors that name them.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

using namespace zf;

namespace {

std::string write(const std::string &dir, const std::string &name, const std::string &text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

// linear_stack's model and data, added on the command line (a DeepSpeed config has neither).
const std::string kModelAndData =
    " --set model.type=linear_stack --set model.hidden=256 --set model.layers=4 --set data.type=random "
    "--set data.samples=512 --set run.progress=off --set train.steps=6 --set optimizer.threads=1 ";

}  // namespace

TEST_CASE("convert: DeepSpeed's ZenFlow example config becomes TOML that validates", "[config][convert]") {
  std::string dir = test::scratch_dir("convert_zenflow");
  // The zf_config.json of DeepSpeed's ZenFlow Llama-2 fine-tuning example.
  std::string json = write(dir, "zf_config.json", R"({
    "train_batch_size": 8,
    "bf16": {"enabled": true},
    "zero_optimization": {
      "stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "zenflow": {"topk_ratio": 0.1, "update_interval": 4, "full_warm_up_rounds": 0, "overlap_step": true}
    },
    "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "gradient_clipping": 1.0,
    "zero_allow_untested_optimizer": true,
    "wall_clock_breakdown": false
  })");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + json + " > " + dir + "/train.toml");
  INFO(converted.output);
  REQUIRE(converted.exit_code == 0);
  std::string toml = test::read_text(dir + "/train.toml");
  INFO(toml);
  for (const char *line : {"plugin = \"zero2\"", "plugin = \"cpu_optimizer\"", "pin_memory = true", "[zenflow]",
                           "topk_ratio = 0.1", "update_interval = 4", "overlap_step = true", "schedule = \"deepspeed\"", "dtype = \"bfloat16\"",
                           "plugin = \"cpu_adam\"", "lr = 2e-05", "beta2 = 0.999", "clip_grad_norm = 1.0",
                           "#   train_batch_size: ", "#   zero_allow_untested_optimizer: ignored"})
    CHECK(toml.find(line) != std::string::npos);
  test::Outcome valid = test::run_command(test::zfcore() + " validate " + dir + "/train.toml" + kModelAndData);
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
}

TEST_CASE("convert: a converted config, and the JSON run as is, train to the hand-written twin's param_digest",
          "[config][convert]") {
  std::string dir = test::scratch_dir("convert_twin");
  std::string json = write(dir, "ds.json", R"({
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
  std::string twin = write(dir, "twin.toml",
                           "[train]\nmicro_batch = 32\ngrad_accum = 2\nclip_grad_norm = 0.5\nlr_schedule = \"cosine\"\n"
                           "warmup_steps = 2\nmin_lr_ratio = 0.2\n[optimizer]\nplugin = \"cpu_adam\"\nlr = 3e-3\n"
                           "beta1 = 0.8\nbeta2 = 0.99\nweight_decay = 0.1\n[stage]\nplugin = \"zero1\"\n"
                           "reduce_bucket_size = 5000\n[offload]\nplugin = \"cpu_optimizer\"\n");
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

TEST_CASE("convert: nvme offload maps to nvme, parameter offload to cpu_full, unknown keys are errors that name them",
          "[config][convert]") {
  std::string dir = test::scratch_dir("convert_errors");
  std::string nvme = write(dir, "nvme.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 4},
      "stage3_prefetch_bucket_size": 1000, "offload_param": {"device": "cpu"}}, "aio": {"queue_depth": 16}})");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + nvme);
  INFO(converted.output);
  REQUIRE(converted.exit_code == 0);
  for (const char *line : {"plugin = \"nvme\"", "path = \"/local_nvme\"", "queue_depth = 16", "plugin = \"zero3\"",
                           "prefetch_bucket_size = 1000", "plugin = \"cpu_adam\"",
                           "zero_optimization.offload_param: not converted",
                           "zero_optimization.offload_optimizer.buffer_count: ignored"})
    CHECK(converted.output.find(line) != std::string::npos);

  std::string params = write(dir, "params.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu", "pin_memory": true, "buffer_count": 5}}})");
  test::Outcome full = test::run_command(test::zfcore() + " convert " + params);
  INFO(full.output);
  REQUIRE(full.exit_code == 0);
  for (const char *line : {"plugin = \"cpu_full\"", "pin_memory = true", "plugin = \"zero3\"", "plugin = \"cpu_adam\"",
                           "zero_optimization.offload_param.buffer_count: ignored"})
    CHECK(full.output.find(line) != std::string::npos);

  const std::pair<std::string, std::string> bad[] = {
      {R"({"train_micro_batch": 4})", "\"train_micro_batch\" is not a DeepSpeed config key"},
      {R"({"zero_optimization": {"stage": 2, "overlap": true}})", "\"zero_optimization.overlap\""},
      {R"({"zero_optimization": {"stage": 5}})", "zero_optimization.stage = 5"},
      {R"({"optimizer": {"type": "SGD"}})", "optimizer.type = \"SGD\""},
      {R"({"zero_optimization": {"zenflow": {"topk_ratio": 0.1}}})", "needs zero_optimization.offload_optimizer"},
      {R"({"scheduler": {"type": "OneCycle"}})", "scheduler.type = \"OneCycle\""},
      {R"([1, 2])", "must be an object"}};
  for (const auto &[text, message] : bad) {
    test::Outcome outcome = test::run_command(test::zfcore() + " convert " + write(dir, "bad.json", text));
    INFO(text << "\n" << outcome.output);
    CHECK(outcome.exit_code == 1);
    CHECK(outcome.output.find(dir + "/bad.json") != std::string::npos);
    CHECK(outcome.output.find(message) != std::string::npos);
  }
}
