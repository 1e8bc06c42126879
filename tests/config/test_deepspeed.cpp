// DeepSpeed and Hugging Face Trainer configs as users bring them: "auto" is what the Trainer fills
// in by default, each note says the value that applies; DeepSpeed's semantics are kept (its
// schedulers' learning rate, step for step, against DeepSpeed's formulas; ZenFlow's defaults) or the
// config is refused as DeepSpeed refuses it, at the DeepSpeed key's line, with fixes that convert.
#include "runtime/error.hpp"
#include "runtime/memory.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

using namespace zf;
using nlohmann::json;

namespace {

std::string fixture(const std::string &name) { return test::source_dir() + "/tests/config/deepspeed/" + name; }

// A small model and data (a DeepSpeed config has neither), and a quick run.
const std::string kModelAndData =
    " --set model.type=linear_stack --set model.hidden=32 --set model.layers=2 --set data.type=random "
    "--set data.samples=64 --set run.progress=off --set checkpoint.final=false ";

std::vector<double> lrs_of(const std::string &run_dir) {
  std::vector<double> lrs;
  std::stringstream lines(test::read_text(run_dir + "/steps.jsonl"));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) lrs.push_back(json::parse(line)["lr"].get<double>());
  return lrs;
}

// The oracle: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR
// (deepspeed/runtime/lr_schedules.py) as its engine steps them: the scheduler is stepped after each
// optimizer step, so optimizer step s (1-based) runs at the lr get_lr() gives for
// last_batch_iteration = s - 2 (-1 before the first scheduler step: the lr set at construction).
struct DeepSpeedScheduler {
  std::string type, warmup_type = "log";
  double min_lr = 0, max_lr = 0;                           // WarmupLR, WarmupDecayLR
  double org_lr = 0, warmup_min_ratio = 0, cos_min_ratio = 1e-4;  // WarmupCosineLR
  int warmup_num_steps = 1000, total_num_steps = 0;

  double lr_of_step(int step) const {
    const int iteration = step - 2;
    const int warmup = std::max(2, warmup_num_steps);
    const double inverse_log = 1.0 / std::log(double(warmup));
    auto rise = [&](int i) { return warmup_type == "log" ? inverse_log * std::log(i + 1.0) : double(i) / warmup; };
    if (type == "WarmupCosineLR") {
      if (iteration < 0) return 0.0;
      double ratio;
      if (iteration < warmup) {
        ratio = warmup_min_ratio + rise(iteration) * (1.0 - warmup_min_ratio);
      } else {
        const double progress = std::min(1.0, double(iteration - warmup + 1) / std::max(1, total_num_steps - warmup));
        ratio = std::max(0.0, cos_min_ratio + (1.0 - cos_min_ratio) * (1 + std::cos(M_PI * progress)) / 2);
      }
      return org_lr * ratio;
    }
    if (iteration < 0) return min_lr;
    double gamma = 1.0;
    if (iteration < warmup) gamma = rise(iteration);
    else if (type == "WarmupDecayLR")
      gamma = std::max(0.0, double(total_num_steps - iteration) / std::max(1.0, double(total_num_steps - warmup)));
    return min_lr + (max_lr - min_lr) * gamma;
  }
};

}  // namespace

TEST_CASE("deepspeed: the converted config's first 50 learning rates are DeepSpeed's, for its three schedulers with "
          "log and linear warm-up", "[config][convert]") {
  std::string dir = test::scratch_dir("deepspeed_lr");
  struct Case {
    std::string name, json;
    DeepSpeedScheduler oracle;
  };
  auto warmup_lr = [](const std::string &warmup_type) {
    DeepSpeedScheduler s{"WarmupLR", warmup_type};
    s.min_lr = 1e-4, s.max_lr = 1e-3, s.warmup_num_steps = 10;
    return s;
  };
  auto decay = [](const std::string &warmup_type) {
    DeepSpeedScheduler s{"WarmupDecayLR", warmup_type};
    s.min_lr = 1e-5, s.max_lr = 1e-3, s.warmup_num_steps = 10, s.total_num_steps = 40;
    return s;
  };
  auto cosine = [](const std::string &warmup_type) {
    DeepSpeedScheduler s{"WarmupCosineLR", warmup_type};
    s.org_lr = 2e-3, s.warmup_min_ratio = 0.1, s.cos_min_ratio = 0.05, s.warmup_num_steps = 10, s.total_num_steps = 40;
    return s;
  };
  // WarmupLR without warmup_max_lr: its peak is the optimizer's lr.
  DeepSpeedScheduler inherited{"WarmupLR", "linear"};
  inherited.max_lr = 2e-3, inherited.warmup_num_steps = 7;
  const std::string adam = R"("optimizer": {"type": "AdamW", "params": {"lr": 2e-3}}, )";
  std::vector<Case> cases;
  for (const std::string type : {"log", "linear"}) {
    cases.push_back({"warmup_lr_" + type, "{" + adam + R"("scheduler": {"type": "WarmupLR", "params": {
        "warmup_min_lr": 1e-4, "warmup_max_lr": 1e-3, "warmup_num_steps": 10, "warmup_type": ")" + type + "\"}}}",
                     warmup_lr(type)});
    cases.push_back({"decay_" + type, "{" + adam + R"("scheduler": {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 10, "total_num_steps": 40,
        "warmup_type": ")" + type + "\"}}}",
                     decay(type)});
    cases.push_back({"cosine_" + type, "{" + adam + R"("scheduler": {"type": "WarmupCosineLR", "params": {
        "warmup_min_ratio": 0.1, "cos_min_ratio": 0.05, "warmup_num_steps": 10, "total_num_steps": 40,
        "warmup_type": ")" + type + "\"}}}",
                     cosine(type)});
  }
  cases.push_back({"inherited", "{" + adam + R"("scheduler": {"type": "WarmupLR", "params": {
      "warmup_num_steps": 7, "warmup_type": "linear"}}})", inherited});
  for (const Case &c : cases) {
    INFO(c.name << ": " << c.json);
    const std::string json_file = test::write_file(dir, c.name + ".json", c.json);
    const std::string toml = dir + "/" + c.name + ".toml";
    REQUIRE(test::run_command(test::zfcore() + " convert " + json_file + " > " + toml).exit_code == 0);
    // 50 steps, past total_num_steps: the decay stays at its end, as DeepSpeed's does.
    test::Outcome run = test::run_command(test::zfcore() + " run " + toml + kModelAndData +
                                          "--set train.steps=50 --set run.output_dir=" + dir + "/" + c.name);
    INFO(test::read_text(toml) << run.output);
    REQUIRE(run.exit_code == 0);
    const std::vector<double> lrs = lrs_of(dir + "/" + c.name);
    REQUIRE(lrs.size() == 50);
    for (int step = 1; step <= 50; ++step) {
      INFO("step " << step);
      CHECK(lrs[step - 1] == Approx(c.oracle.lr_of_step(step)).epsilon(1e-6).margin(1e-12));
    }
  }
}

TEST_CASE("deepspeed: warmup_num_steps 0, 1 and 2 give WarmupLR and WarmupDecayLR DeepSpeed's one warm-up of "
          "max(2, n) steps", "[config][convert]") {
  std::string dir = test::scratch_dir("deepspeed_short_warmup");
  for (const std::string type : {"WarmupLR", "WarmupDecayLR"}) {
    std::vector<std::vector<double>> runs;
    for (int warmup : {0, 1, 2}) {
      const std::string name = type + "_" + std::to_string(warmup);
      INFO(name);
      DeepSpeedScheduler oracle{type, "log"};
      oracle.min_lr = 1e-5, oracle.max_lr = 1e-3, oracle.warmup_num_steps = warmup, oracle.total_num_steps = 8;
      const std::string json_file = test::write_file(dir, name + ".json", R"({"scheduler": {"type": ")" + type + R"(", "params": {
          "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": )" + std::to_string(warmup) +
                                                                  (type == "WarmupLR" ? "" : R"(, "total_num_steps": 8)") +
                                                                  "}}}");
      test::Outcome run = test::run_command(test::zfcore() + " run " + json_file + kModelAndData +
                                            "--set train.steps=8 --set run.output_dir=" + dir + "/" + name);
      INFO(run.output);
      REQUIRE(run.exit_code == 0);
      const std::vector<double> lrs = lrs_of(dir + "/" + name);
      REQUIRE(lrs.size() == 8);
      for (int step = 1; step <= 8; ++step) {
        INFO("step " << step);
        CHECK(lrs[step - 1] == Approx(oracle.lr_of_step(step)).epsilon(1e-6).margin(1e-12));
      }
      CHECK(lrs[0] == Approx(1e-5));  // the warm-up's start, then the peak at step 3
      CHECK(lrs[2] == Approx(1e-3));
      runs.push_back(lrs);
    }
    CHECK(runs[0] == runs[2]);
    CHECK(runs[1] == runs[2]);
  }
}

TEST_CASE("deepspeed: the Hugging Face Trainer's ZeRO-3 offload config: each \"auto\" is the Trainer's default, "
          "noted with its value, and trains at it", "[config][convert]") {
  std::string dir = test::scratch_dir("deepspeed_hf_auto");
  const std::string config = fixture("hf_trainer_zero3_offload.json");
  test::Outcome converted = test::run_command(test::zfcore() + " convert " + config);
  INFO(converted.output);
  REQUIRE(converted.exit_code == 0);
  // TrainingArguments' defaults: lr 5e-5, betas (0.9, 0.999), eps 1e-8, weight decay 0, clipping 1.0,
  // 8 per device, no accumulation, no warm-up, fp16 and bf16 off.
  for (const char *line : {"lr = 5e-05\n", "beta1 = 0.9\n", "beta2 = 0.999\n", "eps = 1e-08\n", "weight_decay = 0.0\n",
                           "clip_grad_norm = 1.0\n", "micro_batch = 8\n", "grad_accum = 1\n", "warmup_steps = 0\n",
                           "dtype = \"float32\"\n", "plugin = \"cpu_full\"\n", "lr_schedule = \"constant\"\n"})
    CHECK_THAT(converted.output, Catch::Contains(line));
  CHECK_THAT(converted.output, !Catch::Contains("global_batch ="));
  struct Note {
    const char *key, *value;
  };
  for (const Note &n : {Note{"optimizer.params.lr", "5e-05 (TrainingArguments.learning_rate)"},
                        Note{"optimizer.params.betas", "(0.9, 0.999) (TrainingArguments.adam_beta1, adam_beta2)"},
                        Note{"optimizer.params.eps", "1e-08"}, Note{"optimizer.params.weight_decay", "0.0"},
                        Note{"gradient_clipping", "1.0 (TrainingArguments.max_grad_norm)"},
                        Note{"train_micro_batch_size_per_gpu", "8 (TrainingArguments.per_device_train_batch_size)"},
                        Note{"gradient_accumulation_steps", "1"},
                        Note{"scheduler.params.warmup_num_steps", "0 (TrainingArguments.warmup_steps): DeepSpeed's scheduler "
                                                                       "warms up over max(2, 0) = 2 steps"},
                        Note{"scheduler.params.warmup_max_lr", "5e-05"}, Note{"scheduler.params.warmup_min_lr", "0.0"},
                        Note{"fp16.enabled", "false (TrainingArguments.fp16): off"},
                        Note{"bf16.enabled", "false (TrainingArguments.bf16): off"}})
    CHECK_THAT(converted.output, Catch::Contains(std::string("#   ") + n.key +
                                                 ": \"auto\": the Hugging Face Trainer's default, " + n.value));
  // The values the Trainer derives from the run or the model say what applies instead.
  CHECK_THAT(converted.output, Catch::Contains("#   train_batch_size: \"auto\": the Trainer fills in "
                                               "per_device_train_batch_size x gradient_accumulation_steps x ranks"));
  // Those it derives from the model, which a DeepSpeed config does not name: DeepSpeed's default for
  // the key, written out and said.
  struct Derived {
    const char *key, *toml, *value;
  };
  for (const Derived &d : {Derived{"reduce_bucket_size", "reduce_bucket_size", "500000000"},
                           Derived{"stage3_prefetch_bucket_size", "prefetch_bucket_size", "50000000"},
                           Derived{"stage3_param_persistence_threshold", "param_persistence_threshold", "100000"}}) {
    CHECK_THAT(converted.output, Catch::Contains(std::string("\n") + d.toml + " = " + d.value + "\n"));
    CHECK_THAT(converted.output, Catch::Contains(std::string("#   zero_optimization.") + d.key + ": \"auto\": the "
                                                 "Trainer fills in ") &&
                                     Catch::Contains(std::string(" of the model, which a DeepSpeed config does not "
                                                                 "name: DeepSpeed's default for the key, ") +
                                                     d.value + ", applies\n"));
  }
  CHECK_THAT(converted.output, Catch::Contains("#   zero_optimization.reduce_bucket_size: \"auto\": the Trainer fills "
                                               "in hidden_size x hidden_size"));
  CHECK_THAT(converted.output, !Catch::Contains("default applies"));
  CHECK_THAT(converted.output, !Catch::Contains("zfcore's default applies\n"));
  // As DeepSpeed trains it: WarmupLR with the Trainer's 0 warm-up steps warms up over max(2, 0) = 2
  // iterations from warmup_min_lr 0, so steps 1 and 2 run at 0 and step 3 at 5e-5.
  test::Outcome run = test::run_command(test::zfcore() + " run " + config + kModelAndData +
                                        "--set train.steps=3 --set run.output_dir=" + dir + "/out");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const std::vector<double> lrs = lrs_of(dir + "/out");
  REQUIRE(lrs.size() == 3);
  CHECK(lrs[0] == 0);
  CHECK(lrs[1] == 0);
  CHECK(lrs[2] == Approx(5e-5));
  CHECK(test::json_field(test::read_text(dir + "/out/summary.json"), "samples_per_step") == "8");

  // Without a scheduler block the Trainer makes its own: linear decay to 0, no warm-up.
  json bare = json::parse(test::read_text(config));
  bare.erase("scheduler");
  test::Outcome linear = test::run_command(test::zfcore() + " convert " + test::write_file(dir, "bare.json", bare.dump(2)));
  CHECK_THAT(linear.output, Catch::Contains("lr_schedule = \"linear\"\n") && Catch::Contains("min_lr_ratio = 0.0\n") &&
                                Catch::Contains("#   scheduler: not in the config"));
}

TEST_CASE("deepspeed: what DeepSpeed refuses is refused at the DeepSpeed key's line, and each fix offered converts "
          "and validates", "[config][convert]") {
  std::string dir = test::scratch_dir("deepspeed_refusals");
  std::filesystem::create_directories(dir + "/nvme");
  using Fix = std::function<void(json &)>;
  struct Case {
    std::string name;
    json config;
    std::string key;                    // where the message points: "file:line:col" of this key
    std::vector<std::string> messages;  // parts of the message
    std::vector<Fix> fixes;             // each fix the message offers
  };
  const json refused = json::parse(test::read_text(fixture("refused/zero1_partial_offload_zenflow.json")));
  auto zero = [](json &c) -> json & { return c["zero_optimization"]; };
  json nvme_zenflow = {{"train_micro_batch_size_per_gpu", 4},
                       {"zero_optimization",
                        {{"stage", 3},
                         {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", dir + "/nvme"}}},
                         {"offload_param", {{"device", "cpu"}}},
                         {"zenflow", {{"topk_ratio", 0.1}}}}}};
  json param_stage1 = {{"zero_optimization", {{"stage", 1}, {"offload_optimizer", {{"device", "cpu"}}},
                                              {"offload_param", {{"device", "cpu"}}}}}};
  json ratio_stage2 = {{"zero_optimization", {{"stage", 2}, {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}}}}};
  json ratio_zenflow = {{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}, {"ratio", 0.5}}},
                                               {"zenflow", {{"topk_ratio", 0.1}}}}}};
  json warm_down = {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
                    {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_min_lr", 0.01}, {"warmup_max_lr", 1e-3}}}}}};
  const std::vector<Case> cases = {
      {"zero1_ratio_zenflow", refused, "zero_optimization.offload_optimizer.ratio",
       {"zero_optimization.offload_optimizer.ratio = 0.3: DeepSpeed offloads part of the optimizer under stage 3 only",
        "the stage is 1", "remove ratio"},
       {[&](json &c) { zero(c)["offload_optimizer"].erase("ratio"); }}},
      {"offload_param_stage1", param_stage1, "zero_optimization.offload_param",
       {"zero_optimization.offload_param needs zero_optimization.stage = 3", "remove offload_param, or set "
                                                                             "zero_optimization.stage to 3"},
       {[&](json &c) { zero(c).erase("offload_param"); }, [&](json &c) { zero(c)["stage"] = 3; }}},
      {"ratio_stage2", ratio_stage2, "zero_optimization.offload_optimizer.ratio",
       {"Partial offloading only supported for ZeRO Stage 3", "remove ratio to update the whole optimizer state on the "
                                                               "CPU, or set zero_optimization.stage to 3"},
       {[&](json &c) { zero(c)["offload_optimizer"].erase("ratio"); }, [&](json &c) { zero(c)["stage"] = 3; }}},
      {"ratio_zenflow", ratio_zenflow, "zero_optimization.offload_optimizer.ratio",
       {"both choose what the GPU updates", "remove ratio"},
       {[&](json &c) { zero(c)["offload_optimizer"].erase("ratio"); }}},
      {"nvme_param_zenflow", nvme_zenflow, "zero_optimization.offload_param",
       {"keeps the parameters in host memory, but zero_optimization.zenflow", "remove offload_param"},
       {[&](json &c) { zero(c).erase("offload_param"); }}},
      {"warm_down", warm_down, "scheduler.params.warmup_min_lr",
       {"scheduler.params.warmup_min_lr = 0.01: the warm-up must rise from it to the peak lr 0.001", "set it between 0"},
       {[&](json &c) { c["scheduler"]["params"]["warmup_min_lr"] = 1e-4; }}},
  };
  for (const Case &c : cases) {
    INFO(c.name);
    // Written one key a line, so that the key's line is known: "key": at the start of its line.
    const std::string text = c.config.dump(2);
    const std::string file = test::write_file(dir, c.name + ".json", text);
    const std::string last = c.key.substr(c.key.rfind('.') + 1);
    const size_t at = text.find("\"" + last + "\":");
    REQUIRE(at != std::string::npos);
    const int line = int(std::count(text.begin(), text.begin() + long(at), '\n')) + 1;
    const int column = int(at - text.rfind('\n', at));
    for (const std::string command : {"convert", "validate", "run"}) {
      const std::string extra = command == "convert" ? "" : kModelAndData + "--set run.output_dir=" + dir + "/out_" + c.name;
      test::Outcome outcome = test::run_command(test::zfcore() + " " + command + " " + file + extra);
      INFO(command << outcome.output);
      CHECK(outcome.exit_code == 1);
      CHECK_THAT(outcome.output, Catch::Contains(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": "));
      for (const std::string &part : c.messages) CHECK_THAT(outcome.output, Catch::Contains(part));
    }
    for (size_t f = 0; f < c.fixes.size(); ++f) {
      json fixed = c.config;
      c.fixes[f](fixed);
      const std::string fixed_file = test::write_file(dir, c.name + "_fix" + std::to_string(f) + ".json", fixed.dump(2));
      test::Outcome valid = test::run_command(test::zfcore() + " validate " + fixed_file + kModelAndData);
      INFO("fix " << f << ": " << fixed.dump() << "\n" << valid.output);
      CHECK(valid.exit_code == 0);
    }
  }
}

TEST_CASE("deepspeed: data_types.grad_accum_dtype is honoured, fp32 as train.grad_accum_dtype = \"float32\", each "
          "value noted",
          "[config][convert]") {
  std::string dir = test::scratch_dir("deepspeed_accum");
  test::Outcome fp32 = test::run_command(
      test::zfcore() + " convert " + test::write_file(dir, "fp32.json", R"({"data_types": {"grad_accum_dtype": "fp32"}})"));
  CHECK(fp32.exit_code == 0);
  CHECK_THAT(fp32.output, Catch::Contains("#   data_types.grad_accum_dtype: \"fp32\": gradients accumulate in float32, "
                                          "the compute dtype, as in DeepSpeed"));
  test::Outcome bf16 = test::run_command(test::zfcore() + " convert " +
                                         test::write_file(dir, "bf16.json", R"({"bf16": {"enabled": true},
                                                "data_types": {"grad_accum_dtype": "bf16"}})"));
  CHECK(bf16.exit_code == 0);
  CHECK_THAT(bf16.output, Catch::Contains("gradients accumulate in bfloat16, the compute dtype, as in DeepSpeed"));
  // fp32 accumulation of bf16 gradients, under stage 1 with the optimizer on the CPU: the TOML twin's run.
  const std::string json_file = test::write_file(dir, "bf16_fp32.json", R"({"bf16": {"enabled": true}, "gradient_accumulation_steps": 4,
      "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})");
  test::Outcome wide = test::run_command(test::zfcore() + " convert " + json_file);
  INFO(wide.output);
  REQUIRE(wide.exit_code == 0);
  CHECK_THAT(wide.output, Catch::Contains("grad_accum_dtype = \"float32\"\n") &&
                              Catch::Contains("#   data_types.grad_accum_dtype: \"fp32\": train.grad_accum_dtype = "
                                              "\"float32\""));
  auto digest = [&](const std::string &name, const std::string &command) {
    test::Outcome r = test::run_command(command + kModelAndData + "--set train.steps=2 --set run.output_dir=" + dir +
                                        "/" + name);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    return test::json_field(test::read_text(dir + "/" + name + "/summary.json"), "param_digest");
  };
  const std::string from_json = digest("json", test::zfcore() + " run " + json_file);
  const std::string twin = digest("twin", test::zfcore() + " run " + json_file + " --set train.grad_accum_dtype=float32");
  const std::string summed = digest("auto", test::zfcore() + " run " + json_file + " --set train.grad_accum_dtype=auto");
  CHECK(from_json == twin);
  CHECK(from_json != summed);
  // Stages 2 and 3 take it too (fp32 gradient shards, reduced in fp32): on one rank the same fp32
  // sums, so stage 1's parameters.
  for (const char *stage : {"2", "3"}) {
    const std::string sharded = test::write_file(dir, std::string("stage") + stage + ".json",
                                      R"({"bf16": {"enabled": true}, "gradient_accumulation_steps": 4,
      "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization": {"stage": )" + std::string(stage) +
                                          R"(, "offload_optimizer": {"device": "cpu"}}})");
    test::Outcome converted = test::run_command(test::zfcore() + " convert " + sharded);
    INFO(converted.output);
    CHECK_THAT(converted.output, Catch::Contains("grad_accum_dtype = \"float32\"\n"));
    CHECK(digest(std::string("stage") + stage, test::zfcore() + " run " + sharded) == from_json);
  }
}

TEST_CASE("deepspeed: estimate takes a DeepSpeed JSON with a model alone, and gives the config's memory in GiB",
          "[config][convert]") {
  const std::string command = test::zfcore() + " estimate " + fixture("zero3_offload.json") + " --set model.preset=gpt2";
  test::Outcome estimate = test::run_command(command);
  INFO(estimate.output);
  CHECK(estimate.exit_code == 0);
  CHECK_THAT(estimate.output, Catch::Contains("this config (zero3, offload cpu_full): per rank ") &&
                                  Catch::Contains(" GiB where the model computes, ") &&
                                  Catch::Contains(" GiB pinned host"));
  // The tables in the memory plan's units (MiB, GiB), each cell the exact count of --bytes.
  test::Outcome exact = test::run_command(command + " --bytes");
  INFO(exact.output);
  REQUIRE(exact.exit_code == 0);
  for (const std::string stage : {"zero0", "zero1", "zero2", "zero3"}) {
    std::istringstream cells(test::line_with(exact.output, "  " + stage + " "));
    std::string name, expected = format("  %-6s", stage.c_str());
    cells >> name;
    for (int cell = 0; cell < 7; ++cell) {  // params, grads, master, opt_state, staging, transient, total
      unsigned long long bytes = 0;
      REQUIRE(cells >> bytes);
      expected += format(" %14s", format_bytes(bytes).c_str());
    }
    CHECK(test::line_with(estimate.output, "  " + stage + " ").rfind(expected, 0) == 0);
  }
}

TEST_CASE("deepspeed: a run prints the notes at its run directory's first run, and with --verbose every time",
          "[config][convert]") {
  std::string dir = test::scratch_dir("deepspeed_notes_once");
  const std::string config = fixture("hf_trainer_zero3_offload.json");
  const std::string command = test::zfcore() + " run " + config + kModelAndData + "--set run.output_dir=" + dir + "/out";
  const std::string note = "  optimizer.params.lr: \"auto\": the Hugging Face Trainer's default, 5e-05";
  test::Outcome first = test::run_command(command + " --set train.steps=1");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Contains(note));
  test::Outcome again = test::run_command(command + " --set train.steps=2");
  INFO(again.output);
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.output, !Catch::Contains(note) && Catch::Contains("notes on the DeepSpeed keys, printed at the first "
                                                                     "run in " + dir + "/out"));
  test::Outcome verbose = test::run_command(command + " --set train.steps=2 --verbose");
  INFO(verbose.output);
  CHECK_THAT(verbose.output, Catch::Contains(note));
}
