#include "engine/resume_layout.hpp"

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/reshard.hpp"
#include "engine/training_checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace zf {
namespace fs = std::filesystem;

RecordedRun read_recorded_run(const fs::path &checkpoint) {
  RecordedRun run;
  std::string text;
  const std::string path = (checkpoint / "checkpoint.json").string();
  // An edited or damaged record is not trusted (the checkpoint's damage check says what is wrong).
  if (!checkpoint_record_problem(checkpoint).empty()) return run;
  if (!read_regular_file(path, 1 << 20, &text).empty()) return run;
  nlohmann::json info;
  try {
    info = parse_json(text, path);
  } catch (const Error &) {
    return run;
  }
  if (!info.is_object()) return run;
  auto text_of = [&](const char *key) {
    return info.contains(key) && info[key].is_string() ? info[key].get<std::string>() : std::string();
  };
  auto number_of = [&](const char *key) {
    return info.contains(key) && info[key].is_number_integer() ? info[key].get<int64_t>() : int64_t(0);
  };
  run.world_size = number_of("world_size");
  run.micro_batch = number_of("micro_batch");
  run.grad_accum = number_of("grad_accum");
  run.config = text_of("config");
  run.stage = text_of("stage");
  run.offload = text_of("offload");
  run.optimizer = text_of("optimizer");
  run.run_name = text_of("run_name");
  run.run_id = text_of("run_id");
  run.config_digest = text_of("config_digest");
  run.output_dir = text_of("output_dir");
  run.zenflow = info.contains("zenflow") && info["zenflow"].is_boolean() && info["zenflow"].get<bool>();
  if (info.contains("initial_loss") && info["initial_loss"].is_number()) run.initial_loss = info["initial_loss"].get<double>();
  if (info.contains("data") && info["data"].is_object()) {
    const nlohmann::json &data = info["data"];
    if (data.value("path", nlohmann::json()).is_string()) run.data_path = data["path"].get<std::string>();
    if (data.value("digest", nlohmann::json()).is_string()) run.data_digest = data["digest"].get<std::string>();
    if (data.value("sequences", nlohmann::json()).is_number_integer()) run.data_sequences = data["sequences"].get<int64_t>();
  }
  const nlohmann::json given = info.value("run_config", nlohmann::json());
  auto words = [&](const char *key, std::vector<std::string> &out) {
    if (!given.contains(key) || !given[key].is_array()) return false;
    for (const auto &word : given[key])
      if (word.is_string()) out.push_back(word.get<std::string>());
    return true;
  };
  run.has_config = given.is_object() && given.contains("text") && given["text"].is_string() &&
                   words("set", run.config_set) && words("unset", run.config_unset);
  if (run.has_config) run.config_text = given["text"].get<std::string>();
  if (run.has_config && given.contains("directory") && given["directory"].is_string())
    run.config_directory = given["directory"].get<std::string>();
  return run;
}

namespace {

// The checkpoint a run would resume from, without checking its files (resume() does).
std::optional<fs::path> resume_candidate(const RunConfig &config, const std::string &output_dir,
                                         const std::string &latest) {
  const std::string resume = config.string("checkpoint", "resume");
  if (resume == "never") return std::nullopt;
  if (resume != "auto") return fs::path(resume);
  std::vector<fs::path> mine;
  try {
    mine = checkpoints_of_output_dir(checkpoints_of_run(checkpoint_dir(config, output_dir), config.string("run", "name"),
                                                        nullptr), output_dir, nullptr);
    mine = checkpoints_of_line(mine, latest, false);
  } catch (const Error &) {
    return std::nullopt;  // resume() reports it
  }
  // As the resume will: a newest one whose record is damaged is passed over (and reported there).
  for (auto it = mine.rbegin(); it != mine.rend(); ++it)
    if (checkpoint_record_problem(*it).empty()) return *it;
  return std::nullopt;
}

}  // namespace

RunOptions batch_for_resume(const RunConfig &config, Communicator &comm) {
  RunOptions options = RunOptions::read(config);
  if (config.string("checkpoint", "resume_batch") != "keep") return options;
  const std::optional<fs::path> from =
      resume_candidate(config, options.output_dir, latest_saved(options.output_dir, comm));
  if (!from) return options;
  const RecordedRun recorded = read_recorded_run(*from);
  const int64_t global = recorded.global_batch(), per_step = options.micro_batch * comm.world_size();
  if (global == 0 || global == options.micro_batch * options.grad_accum * comm.world_size()) return options;
  ZF_REQUIRE(global % per_step == 0,
             "%s: checkpoint.resume_batch = \"keep\": %s was trained with a global batch of %lld (micro_batch %lld x "
             "grad_accum %lld x %lld ranks), which train.micro_batch = %lld on %d ranks does not divide; choose a "
             "micro_batch that divides %lld / %d, or checkpoint.resume_batch = \"new\"",
             config.where("checkpoint", "resume_batch").str().c_str(), from->c_str(), (long long)global,
             (long long)recorded.micro_batch, (long long)recorded.grad_accum, (long long)recorded.world_size,
             (long long)options.micro_batch, comm.world_size(), (long long)global, comm.world_size());
  if (comm.rank() == 0)
    std::printf("zfcore: checkpoint.resume_batch = \"keep\": train.grad_accum = %lld (not %lld) keeps the global "
                "batch of %s, %lld samples per step, on %d ranks\n", (long long)(global / per_step),
                (long long)options.grad_accum, from->c_str(), (long long)global, comm.world_size());
  options.grad_accum = global / per_step;
  return options;
}

void check_global_batch(const RecordedRun &recorded, const RunOptions &options, int world_size,
                        const RunConfig &config, const fs::path &checkpoint) {
  const int64_t global = recorded.global_batch(), mine = options.micro_batch * options.grad_accum * world_size;
  if (global == 0 || global == mine || config.string("checkpoint", "resume_batch") == "new") return;
  throw Error(format(
      "%s was trained with a global batch of %lld samples per step (micro_batch %lld x grad_accum %lld x %lld "
      "ranks); this run's is %lld (%lld x %lld x %d). Set checkpoint.resume_batch = \"keep\" to derive "
      "train.grad_accum and keep %lld (the data order continues exactly), or \"new\" to continue with %lld (step s "
      "then reads the samples [(s-1) x %lld, s x %lld) of the data order)",
      checkpoint.c_str(), (long long)global, (long long)recorded.micro_batch, (long long)recorded.grad_accum,
      (long long)recorded.world_size, (long long)mine, (long long)options.micro_batch, (long long)options.grad_accum,
      world_size, (long long)global, (long long)mine, (long long)mine, (long long)mine));
}

void check_same_optimizer(const fs::path &checkpoint, const TrainingCheckpoints::RunIdentity &mine) {
  std::string text;
  const std::string path = (checkpoint / "checkpoint.json").string();
  if (!read_regular_file(path, 1 << 20, &text).empty()) return;  // the rank files' checks say what is wrong
  nlohmann::json info = parse_json(text, path);
  if (!info.is_object()) return;
  auto recorded = [&](const char *key) {
    return info.contains(key) && info[key].is_string() ? info[key].get<std::string>() : std::string();
  };
  const std::string optimizer = recorded("optimizer");
  auto listed = [](const std::vector<std::string> &names) {
    std::string out;
    for (const std::string &name : names) out += (out.empty() ? "" : ", ") + name;
    return out;
  };
  // Optimizers with the same state (gpu_adam and cpu_adam: exp_avg, exp_avg_sq) continue each
  // other's checkpoints, as when offload is switched on or off. Older checkpoints name no state:
  // loading them names a tensor that is missing.
  std::vector<std::string> state;
  if (info.contains("optimizer_state") && info["optimizer_state"].is_array())
    for (const auto &name : info["optimizer_state"])
      if (name.is_string()) state.push_back(name.get<std::string>());
  ZF_REQUIRE(!info.contains("optimizer_state") || state == mine.optimizer_state,
             "%s was written with optimizer.plugin = \"%s\" (state %s); this run uses \"%s\" (state %s), whose state "
             "is not the same: resume with optimizer.plugin = \"%s\", or start a new run from the model (export it "
             "with checkpoint.export_hf, then model.init_from)",
             checkpoint.c_str(), excerpt(optimizer).c_str(), excerpt(listed(state)).c_str(), mine.optimizer.c_str(),
             listed(mine.optimizer_state).c_str(), excerpt(optimizer).c_str());
}

void check_same_data(const RecordedRun &recorded, const TrainingCheckpoints::RunIdentity &mine,
                     const RunConfig &config, const fs::path &checkpoint, bool say) {
  if (recorded.data_digest.empty() || mine.data_digest.empty()) return;  // not recorded, or no data read
  if (recorded.data_digest == mine.data_digest && recorded.data_sequences == mine.data_sequences) return;
  const std::string was = format("data.path = \"%s\" (%lld training sequences, sampled digest %s)",
                                 excerpt(recorded.data_path).c_str(), (long long)recorded.data_sequences,
                                 excerpt(recorded.data_digest).c_str());
  const std::string now = format("data.path = \"%s\" holds other data (%lld training sequences, sampled digest %s)",
                                 mine.data_path.c_str(), (long long)mine.data_sequences, mine.data_digest.c_str());
  if (config.string("checkpoint", "resume_data") == "new") {
    if (say)
      std::printf("zfcore: %s was trained on %s; this run's %s, and continues on it (checkpoint.resume_data = "
                  "\"new\")\n", checkpoint.c_str(), was.c_str(), now.c_str());
    return;
  }
  throw Error(format("%s was trained on %s; this run's %s: the data changed since the checkpoint (rewritten, "
                     "replaced or re-tokenized), and the run would continue mid-epoch on other sequences. Restore "
                     "the data the checkpoint was trained on, or set checkpoint.resume_data = \"new\" to continue "
                     "on this data",
                     checkpoint.c_str(), was.c_str(), now.c_str()));
}

bool has_zenflow_state(const fs::path &checkpoint) {
  try {
    return SafetensorsFile::open((checkpoint / "rank-00000.safetensors").string()).has("optimizer.zenflow.counters");
  } catch (const Error &) {
    return false;  // the load says what is wrong
  }
}

std::string zenflow_owed(const fs::path &checkpoint) {
  const fs::path first = checkpoint / "rank-00000.safetensors";
  SafetensorsFile file = SafetensorsFile::open(first.string());
  if (!file.has("optimizer.zenflow.counters")) return "";
  const at::Tensor counters = file.load("optimizer.zenflow.counters");
  const int64_t *c = counters.data_ptr<int64_t>();
  int64_t summed = counters.numel() >= 5 ? c[0] : 0;
  bool waiting = counters.numel() >= 5 && c[4] != 0;  // a CPU update's result waits to be swapped in
  if (file.has("optimizer.zenflow.groups")) {  // the staggered schedule: per group, then next and waiting group
    const at::Tensor groups = file.load("optimizer.zenflow.groups");
    const int64_t *g = groups.data_ptr<int64_t>();
    const int64_t count = (groups.numel() - 2) / 2;
    for (int64_t i = 0; i < count; ++i) summed = std::max(summed, g[i]);
    waiting = waiting || (count >= 0 && g[2 * count + 1] >= 0);
  }
  if (summed == 0 && !waiting) return "";
  return format("ZenFlow CPU updates still owed (gradients of up to %lld steps summed for the columns not on the "
                "device%s)", (long long)summed, waiting ? ", and a CPU update's result not yet applied" : "");
}

namespace {
bool has_state(const TrainingState &state, const std::string &name) {
  for (const auto &[held, tensor] : state.optimizer)
    if (held == name) return true;
  return false;
}
}  // namespace

ZenFlowCrossing zenflow_crossing(const fs::path &checkpoint, const TrainingState &state) {
  ZenFlowCrossing crossing;
  const SafetensorsFile file = SafetensorsFile::open((checkpoint / "rank-00000.safetensors").string());
  const bool written = file.has("optimizer.zenflow.counters"), mine = has_state(state, "zenflow.counters");
  const std::string owed = written ? zenflow_owed(checkpoint) : "";
  const RecordedRun was = read_recorded_run(checkpoint);
  ZF_REQUIRE(owed.empty() || mine, "%s holds %s: continue it with a [zenflow] table (on any layout), or resume from a "
             "checkpoint that owes none (the one saved at the end of a run)", checkpoint.c_str(), owed.c_str());
  if (!written) {  // ZenFlow starts afresh; an automatic topk_ratio of the checkpoint's is kept
    for (const auto &[name, tensor] : state.optimizer)
      if (name.rfind("zenflow.", 0) == 0 && name != "zenflow.topk_ratio") crossing.restart.push_back(name);
    crossing.fresh = mine;
    if (mine) crossing.said = "ZenFlow starts here: it selects its columns at the first step";
    return crossing;
  }
  if (!mine) return crossing;
  const bool staggered_written = file.has("optimizer.zenflow.groups"), staggered = has_state(state, "zenflow.groups");
  ZF_REQUIRE(owed.empty() || staggered_written == staggered,
             "%s holds %s of zenflow.schedule = \"%s\": continue it with that schedule, or resume from a checkpoint "
             "that owes none (the one saved at the end of a run)", checkpoint.c_str(), owed.c_str(),
             staggered_written ? "staggered" : "deepspeed");
  crossing.said = "ZenFlow's selection, counters and per-element state (gradient sums, staging, working parameters) "
                  "are carried";
  // The staggered schedule's zenflow.staging holds a group's elements from its start (an older zfcore's: the
  // shard): inherited_schedule reads what waits in it; nothing waits where the schedules differ.
  if (staggered || staggered_written) crossing.restart.push_back("zenflow.staging");
  if (!staggered) return crossing;  // the deepspeed schedule's state is the run's or per element: read as written
  for (const char *name : {"zenflow.groups", "zenflow.correction", "zenflow.group_bounds"})
    if (has_state(state, name)) crossing.restart.push_back(name);
  ZF_REQUIRE(owed.empty() || file.has("optimizer.zenflow.group_bounds"),
             "%s holds %s, but was written by a zfcore that did not record its ZenFlow groups: resume it on the layout "
             "that wrote it (%lld ranks, stage.plugin = \"%s\"), or from a checkpoint that owes none (the one saved at "
             "the end of a run)", checkpoint.c_str(), owed.c_str(), (long long)was.world_size, was.stage.c_str());
  crossing.inherit = true;
  crossing.said += owed.empty() ? "; its staggered groups are this layout's, each continuing the CPU update count of "
                                  "the writer's group it overlaps"
                                : "; the CPU updates it owes are applied at the first step, each over the writer's "
                                  "group with its count, as the writer's next step would; then its staggered groups "
                                  "are this layout's";
  return crossing;
}

namespace {

constexpr const char *kStaging = "optimizer.zenflow.staging";

// Flat elements [lo, hi) of the CPU result that waits in rank's zenflow.staging for its group starting at
// flat element `group`: the file holds the group's elements from its start, or (an older zfcore's) the shard's.
at::Tensor waiting_result(CheckpointShards &shards, int rank, uint64_t group, uint64_t lo, uint64_t hi) {
  const CheckpointMetadata &m = shards.metadata(rank);
  const TensorInfo &info = shards.file(rank).info(kStaging);
  const bool whole = info.shape.size() == 1 && uint64_t(info.shape[0]) == m.shard_end - m.shard_begin;
  at::Tensor staged = at::empty({int64_t(hi - lo)}, at::TensorOptions().dtype(shards.dtype(kStaging)));
  shards.read_rank(rank, kStaging, lo - (whole ? m.shard_begin : group), hi - lo, staged.data_ptr());
  return staged;
}

}  // namespace

bool own_staging(const fs::path &checkpoint, int rank, TrainingState &state, torch::Tensor *whole) {
  auto held = std::find_if(state.optimizer.begin(), state.optimizer.end(),
                           [](const auto &entry) { return entry.first == "zenflow.staging"; });
  if (held == state.optimizer.end()) return true;
  uint64_t stored = 0;
  try {
    const SafetensorsFile file = SafetensorsFile::open((checkpoint / checkpoint_rank_file(rank)).string());
    if (!file.has(kStaging)) return true;  // the load says what is missing
    const std::vector<int64_t> &shape = file.info(kStaging).shape;
    stored = shape.size() == 1 ? uint64_t(shape[0]) : 0;
  } catch (const Error &) {
    return true;  // the load says what is wrong with the file
  }
  const uint64_t mine = uint64_t(held->second.numel());
  if (stored == mine) return true;
  if (stored != state.shard_end - state.shard_begin || mine > stored) return false;  // another schedule's or interval's
  *whole = held->second;  // an older zfcore's, over the whole shard
  state.optimizer.erase(held);
  return true;
}

void read_whole_staging(const fs::path &checkpoint, int rank, std::pair<uint64_t, uint64_t> waiting,
                        torch::Tensor &staging) {
  const auto [begin, end] = waiting;
  if (end <= begin) return;
  CheckpointShards shards = CheckpointShards::open(checkpoint);
  at::Tensor values = at::empty({int64_t(end - begin)}, at::TensorOptions().dtype(shards.dtype(kStaging)));
  shards.read_rank(rank, kStaging, begin, end - begin, values.data_ptr());
  torch::NoGradGuard no_grad;
  staging.narrow(0, 0, int64_t(end - begin)).copy_(values);
}

InheritedSchedule inherited_schedule(const fs::path &checkpoint, uint64_t begin, uint64_t end, bool last_cpu_carried) {
  InheritedSchedule inherited;
  inherited.last_cpu_carried = last_cpu_carried;
  CheckpointShards shards = CheckpointShards::open(checkpoint);
  if (!shards.has("optimizer.zenflow.groups")) return inherited;
  uint64_t covered = 0;  // zero0: every rank holds all of it; the lowest rank's file counts
  for (int r = 0; r < shards.world_size(); ++r) {
    const CheckpointMetadata &m = shards.metadata(r);
    const at::Tensor counts = shards.load(r, "optimizer.zenflow.groups");
    const int64_t groups = (counts.numel() - 2) / 2;
    const int64_t *g = counts.data_ptr<int64_t>();
    if (r == 0) inherited.next_group = g[2 * groups];
    if (!shards.has("optimizer.zenflow.group_bounds")) return inherited;  // an older checkpoint: counts from 0
    const at::Tensor bounds = shards.load(r, "optimizer.zenflow.group_bounds");
    const int64_t *b = bounds.data_ptr<int64_t>();
    ZF_REQUIRE(bounds.numel() == groups + 1 && uint64_t(b[groups]) == m.shard_end - m.shard_begin,
               "%s: rank %d's optimizer.zenflow.group_bounds does not cut its shard of %llu elements into %lld groups: "
               "the checkpoint is damaged", checkpoint.c_str(), r, (unsigned long long)(m.shard_end - m.shard_begin),
               (long long)groups);
    const at::Tensor weights = shards.has("optimizer.zenflow.correction")
                                   ? shards.load(r, "optimizer.zenflow.correction")
                                   : at::Tensor();
    const bool weighed = weights.defined() && weights.numel() == groups + 1 && weights.data_ptr<double>()[groups] == 1;
    for (int64_t k = 0; k < groups; ++k) {
      const uint64_t lo = std::max({m.shard_begin + uint64_t(b[k]), begin, covered});
      const uint64_t hi = std::min(m.shard_begin + uint64_t(b[k + 1]), end);
      if (lo >= hi) continue;
      WriterGroup w;
      w.begin = lo - begin;
      w.end = hi - begin;
      w.summed = g[k];
      w.updates = g[groups + k];
      w.weight = weighed ? weights.data_ptr<double>()[k] : double(g[k]);
      w.waiting = g[2 * groups + 1] == k;
      if (w.waiting) w.staged = waiting_result(shards, r, m.shard_begin + uint64_t(b[k]), lo, hi);
      inherited.groups.push_back(w);
    }
    covered = std::max(covered, m.shard_end);
  }
  return inherited;
}

}  // namespace zf
