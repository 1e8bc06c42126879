#include "engine/training_checkpoint.hpp"

#include "checkpoint/checkpoint_metadata.hpp"
#include "checkpoint/reshard.hpp"
#include "config/limits.hpp"
#include "data/data_source.hpp"
#include "engine/checkpoint_model.hpp"
#include "engine/finite_values.hpp"
#include "engine/placement.hpp"
#include "engine/resume_layout.hpp"
#include "plugin/plugin_set.hpp"
#include "runtime/digest.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/files_held.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

namespace zf {

// The digest says where each parameter's values lie. A lookup table whose entries selectors may
// choose among (ZF_SEGMENT_TRANSPOSED) lies row by row as before that flag existed, and is hashed
// as it was then ([entries, width], no matrix flags), so that checkpoints written before load.
std::string layout_digest(const zf_layout &layout) {
  uint64_t state = kDigestSeed;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    state = digest_bytes(seg.name, std::strlen(seg.name), state);
    const bool table = seg.flags & ZF_SEGMENT_TRANSPOSED;
    const uint32_t selection = ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS | ZF_SEGMENT_TRANSPOSED;
    uint64_t fields[5] = {seg.offset, table ? seg.cols : seg.rows, table ? seg.rows : seg.cols, seg.block,
                          table ? seg.flags & ~selection : seg.flags};
    state = digest_bytes(fields, sizeof fields, state);
  }
  return format("%016llx", (unsigned long long)state);
}

std::string checkpoint_dir(const RunConfig &config, const std::string &output_dir) {
  std::string dir = config.string("checkpoint", "dir");
  return dir.empty() ? output_dir + "/checkpoints" : dir;
}

namespace {
at::Generator device_generator(const Runtime &runtime) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, c10::DeviceIndex(runtime.device_index)));
}

// The output directory (or the config file) as one absolute path: what tells two runs of one
// run.name apart.
std::string absolute_output_dir(const std::string &output_dir) {
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::weakly_canonical(std::filesystem::absolute(output_dir, ec), ec);
  return ec ? output_dir : path.string();
}

std::string joined(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}
}  // namespace

TrainingCheckpoints::TrainingCheckpoints(const RunConfig &config, const std::string &output_dir, Runtime &runtime,
                                         const zf_layout &layout, RunIdentity identity)
    : config_(config), runtime_(runtime), layout_(layout), output_dir_(output_dir), layout_digest_(layout_digest(layout)),
      identity_(std::move(identity)), run_name_(config.string("run", "name")),
      run_id_(first_finding(*runtime.comm, runtime.comm->rank() == 0 ? new_run_id() : "")) {  // rank 0's, on every rank
  const std::string canonical = canonical_config_text(config);
  config_digest_ = format("%016llx", (unsigned long long)digest_bytes(canonical.data(), canonical.size(), kDigestSeed));
  model_ = model_record(config);
  store_ = std::make_unique<CheckpointStore>(checkpoint_dir(config, output_dir), config.integer("checkpoint", "keep"),
                                             *runtime.comm);
  output_dir_at_start_ = absolute_output_dir(output_dir);
  store_at_start_ = absolute_output_dir(store_->directory().string());
}

void TrainingCheckpoints::check_saves(int64_t start_step, int64_t last_step) const {
  std::string found;
  std::error_code ec;
  if (runtime_.comm->rank() == 0 && std::filesystem::is_directory(store_->directory(), ec))
    found = saves_in_the_way(Directory::open(store_->directory().string(), false, "checkpoint.dir"), run_id_,
                             start_step, last_step, config_.integer("checkpoint", "every"),
                             config_.boolean("checkpoint", "final"));
  found = first_finding(*runtime_.comm, found);
  ZF_REQUIRE(found.empty(), "%s", found.c_str());
}

TrainingState TrainingCheckpoints::state(int64_t step, UpdatePlan &update) const {
  TrainingState state;
  state.step = step;
  state.shard_begin = identity_.shard_begin;
  state.shard_end = identity_.shard_end;
  state.layout_digest = layout_digest_;
  state.run_name = run_name_;
  state.run_id = run_id_;
  state.config_digest = config_digest_;
  state.master = update.master();
  state.optimizer = update.state_tensors();
  state.optimizer_pieces = update.state_pieces();
  state.optional = update.optional_state();
  state.rng = at::detail::getDefaultCPUGenerator().get_state();
  if (runtime_.device == ZF_DEVICE_CUDA) state.device_rng = device_generator(runtime_).get_state();
  return state;
}

std::string TrainingCheckpoints::info(int64_t step) const {
  JsonWriter json;
  json.begin_object().key("step").value(step).key("world_size").value(runtime_.comm->world_size());
  // Absolute: zfcore export reads it from wherever it is run (a relative path would name another file there).
  json.key("config").value(identity_.config_file.empty() ? "" : absolute_output_dir(identity_.config_file)).key("layout").value(layout_digest_);
  json.key("optimizer").value(identity_.optimizer).key("optimizer_state").begin_array();
  for (const std::string &name : identity_.optimizer_state) json.value(name);
  json.end_array().key("stage").value(identity_.stage).key("offload").value(identity_.offload);
  json.key("zenflow").value(identity_.zenflow).key("micro_batch").value(identity_.micro_batch);
  json.key("grad_accum").value(identity_.grad_accum).key("run_name").value(run_name_).key("run_id").value(run_id_);
  json.key("config_digest").value(config_digest_).key("output_dir").value(output_dir_at_start_);
  if (std::isfinite(initial_loss_)) json.key("initial_loss").value(initial_loss_);  // the run's, at step 1
  if (!identity_.data_digest.empty())
    json.key("data").begin_object().key("path").value(identity_.data_path).key("sequences")
        .value(identity_.data_sequences).key("digest").value(identity_.data_digest).end_object();
  // What the config was made from, for zfcore export without a config file (one of a sane size).
  const RunConfig::Given &given = config_.given();
  if (given.text.size() <= kMaxRecordedConfigBytes) {
    std::error_code ec;  // where its relative paths start
    json.key("run_config").begin_object().key("directory").value(std::filesystem::current_path(ec).string());
    json.key("text").value(given.text).key("set").begin_array();
    for (const std::string &set : given.overrides) json.value(set);
    json.end_array().key("unset").begin_array();
    for (const std::string &unset : given.unsets) json.value(unset);
    json.end_array().end_object();
  }
  json.key("model").begin_object();
  for (const auto &[key, value] : model_) json.key(key).value(value);
  json.end_object().end_object();
  return json.str();
}

void TrainingCheckpoints::save(int64_t step, UpdatePlan &update) {
  TrainingState saved = state(step, update);
  // ZenFlow hands out the working parameters of its last step; a conversion ran none: the master's.
  if (converting_)
    for (auto &[name, tensor] : saved.optimizer)
      if (name == "zenflow.params") tensor.copy_(saved.master);
  // A diverged update must not replace the good checkpoints: the weights and the optimizer state
  // in memory are checked (state on disk, nvme, is not read back for it).
  const uint64_t begin = identity_.shard_begin;
  std::string mine = local_non_finite(saved.master, [&](int64_t i) { return "weight " + parameter_at(layout_, begin + uint64_t(i)); });
  for (const auto &[name, tensor] : saved.optimizer) {
    if (!mine.empty()) break;
    const bool per_element = tensor.numel() == saved.master.numel();
    mine = local_non_finite(tensor, [&](int64_t i) {
      return format("optimizer state '%s' of ", name.c_str()) +
             (per_element ? parameter_at(layout_, begin + uint64_t(i)) : format("element %lld", (long long)i));
    });
  }
  if (!mine.empty()) mine += format(" (rank %d)", runtime_.comm->rank());
  const std::string bad = first_finding(*runtime_.comm, mine);
  ZF_REQUIRE(bad.empty(),
             "step %lld: the training diverged: %s is not finite after the update. The checkpoint of step %lld is "
             "not written; %s. Lower optimizer.lr (%g), set train.clip_grad_norm, or check the data",
             (long long)step, bad.c_str(), (long long)step, newest().c_str(), config_.real("optimizer", "lr"));
  try {
    saved_path_ = store_->save(saved, info(step));
  } catch (const Error &e) {  // a full disk, a file too large: what is kept, and how to go on from it
    throw Error(format("%s. The checkpoint of step %lld is not written (the next run removes what it left); %s: "
                       "make room for it (or set checkpoint.dir elsewhere) and run again, which goes on from there",
                       e.what(), (long long)step, newest().c_str()));
  }
  saved_step_ = step;
  if (runtime_.comm->rank() == 0) {
    // The head of the run's line: a resume = "auto" after going back to an earlier step continues here.
    record_latest_saved(output_dir_, (store_at_start_ / saved_path_.filename()).string());
    std::printf("zfcore: checkpoint %s\n", held_path_now(saved_path_.string()).c_str());  // where it is, if moved
  }
}

std::string TrainingCheckpoints::newest() const {
  if (saved_step_ == 0) return "no checkpoint was written";
  return format("the newest checkpoint is %s (step %lld)", held_path_now(saved_path_.string()).c_str(), (long long)saved_step_);
}

void TrainingCheckpoints::load_other_layout(const std::filesystem::path &from, TrainingState &loaded,
                                            UpdatePlan &update) {
  const RecordedRun was = read_recorded_run(from);
  const ZenFlowCrossing zenflow = zenflow_crossing(from, loaded);
  Communicator &comm = *runtime_.comm;
  uint64_t read = 0;
  ReshardReport report;
  InheritedSchedule inherited;
  std::string damaged;  // a block that does not match its checksum, on any rank: every rank stops alike
  const auto start = std::chrono::steady_clock::now();
  try {
    report = store_->load_resharded(from, loaded, zenflow.restart, &read);
    const auto &carried = report.carried;
    if (zenflow.inherit)
      inherited = inherited_schedule(from, identity_.shard_begin, identity_.shard_end,
                                     std::find(carried.begin(), carried.end(), "zenflow.last_cpu_update") != carried.end());
  } catch (const CheckpointDamaged &e) {
    damaged = e.what();
  }
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  int64_t bytes[2] = {int64_t(read), int64_t(took.count())};  // read by this rank, in microseconds
  damaged = first_finding(comm, damaged);
  if (!damaged.empty()) throw CheckpointDamaged(damaged);
  // ZenFlow starting here: the working parameters start from the master; the sums and the staging
  // buffer start empty (they are allocated, not written, until ZenFlow's first step, and a checkpoint checks them).
  for (auto &[name, tensor] : loaded.optimizer)
    if (zenflow.fresh && name == "zenflow.params") tensor.copy_(loaded.master);
    else if (zenflow.fresh && (name == "zenflow.gradient_sum" || name == "zenflow.staging")) tensor.zero_();
  if (zenflow.inherit) update.inherit(std::move(inherited));
  std::vector<std::string> restarted;  // the staggered groups inherited are said below, not set up afresh
  for (const std::string &name : report.restarted)
    if (!zenflow.inherit || std::find(zenflow.restart.begin(), zenflow.restart.end(), name) == zenflow.restart.end())
      restarted.push_back(name);
  comm.all_reduce(zf_tensor_view{bytes, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
  comm.all_reduce(zf_tensor_view{bytes + 1, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
  resharded_ = true;
  if (comm.rank() != 0) return;
  uint64_t stored = 0;
  std::error_code ec;
  for (int64_t r = 0; r < std::max<int64_t>(was.world_size, 1); ++r)
    stored += std::filesystem::file_size(from / format("rank-%05lld.safetensors", (long long)r), ec);
  auto described = [](const std::string &stage, const std::string &offload, bool zenflow) {
    return format("stage %s, offload %s%s", stage.empty() ? "?" : stage.c_str(), offload.empty() ? "?" : offload.c_str(),
                  zenflow ? ", ZenFlow" : "");
  };
  const double seconds = double(bytes[1]) / 1e6;
  std::printf("zfcore: %s was written by %lld rank(s) (%s); this run continues it on %d rank(s) (%s). Exact: the fp32 "
              "master and %s, each rank reading the ranges of its own shard (%llu bytes of tensor data read by all "
              "ranks, of %llu in the checkpoint's files, in %.2f s: %.2f GB/s)%s%s\n",
              from.c_str(), (long long)was.world_size, described(was.stage, was.offload, was.zenflow).c_str(),
              comm.world_size(), described(identity_.stage, identity_.offload, identity_.zenflow).c_str(),
              joined(report.carried).c_str(), (unsigned long long)bytes[0], (unsigned long long)stored, seconds,
              seconds > 0 ? double(bytes[0]) / seconds / 1e9 : 0.0, restarted.empty() ? "" : ". Set up afresh by this run: ",
              joined(restarted).c_str());
  if (!zenflow.said.empty()) std::printf("zfcore: %s\n", zenflow.said.c_str());
}

TrainingCheckpoints::RunIdentity run_identity(const RunConfig &config, const PluginSet &plugins,
                                              const RunOptions &options, const Placement &placement,
                                              const DataSource *data) {
  return {config.given().file,     plugins.stage.name(),          plugins.optimizer.name(),
          plugins.optimizer.state_names(), placement.shard_begin,  placement.shard_end,
          plugins.offload.name(),  config.has_table("zenflow"),   options.micro_batch,
          options.grad_accum,      data ? config.string("data", "path") : "",
          data ? data->sampled_digest() : "", data ? data->size() : 0};
}

int64_t TrainingCheckpoints::resume(UpdatePlan &update, const torch::Tensor &params_shard) {
  // A checkpoint named by hand has its tensors checked by the load: all of them before the load on
  // its own layout (which trusts the check), on another only the ranges this rank reads, as it reads
  // them. resume = "auto" takes the newest whole one: on another layout each candidate is loaded as
  // it is checked (read once), and a damaged block sends the run on to the one before it.
  const bool by_hand = config_.string("checkpoint", "resume") != "auto";
  Communicator &comm = *runtime_.comm;
  TrainingState loaded;
  torch::Tensor whole_staging;  // an older zfcore's zenflow.staging, read once the schedule is restored
  bool own = false, done = false;  // own: read as written (same shards); done: loaded while checked
  auto prepare = [&](const std::filesystem::path &candidate) {
    check_same_optimizer(candidate, identity_);
    check_same_model(candidate, config_, "resume (or export)");
    RunOptions batch;
    batch.micro_batch = identity_.micro_batch, batch.grad_accum = identity_.grad_accum;
    check_global_batch(read_recorded_run(candidate), batch, comm.world_size(), config_, candidate);
    if (checkpoint_step_of_name(candidate) < config_.integer("train", "steps"))  // else nothing is trained on the data
      check_same_data(read_recorded_run(candidate), identity_, config_, candidate, comm.rank() == 0);
    loaded = state(0, update);
    whole_staging = torch::Tensor();
    own = store_->same_layout(candidate, loaded) && has_zenflow_state(candidate) == identity_.zenflow &&
          own_staging(candidate, comm.rank(), loaded, &whole_staging);
  };
  auto load_checked = [&](const std::filesystem::path &candidate) -> std::string {
    if (std::string files = store_->damage(candidate, /*tensors=*/false); !files.empty()) return files;  // headers
    prepare(candidate);
    if (own) return store_->damage(candidate);
    try {
      load_other_layout(candidate, loaded, update);  // the same damage on every rank
    } catch (const CheckpointDamaged &e) {
      return std::string(e.what()) + ", found while loading it";
    }
    done = true;
    return "";
  };
  std::optional<std::filesystem::path> from =
      by_hand ? checkpoint_to_resume(config_, output_dir_, comm, true, false)
              : checkpoint_to_resume(config_, output_dir_, comm, true, true, load_checked);
  if (!from) return 0;
  const RecordedRun recorded = read_recorded_run(*from);
  initial_loss_ = recorded.initial_loss;
  if (by_hand) prepare(*from);
  if (own) {
    if (by_hand) require_undamaged(config_, *store_, *from, /*tensors=*/true);
    store_->load(*from, loaded);
    if (comm.rank() == 0 && !recorded.stage.empty() && recorded.stage != identity_.stage)
      std::printf("zfcore: %s was written under stage.plugin = \"%s\"; this run continues it under \"%s\" (each "
                  "rank's shard is the same)\n", from->c_str(), excerpt(recorded.stage).c_str(),
                  identity_.stage.c_str());
  } else if (!done) {
    load_other_layout(*from, loaded, update);
  }
  // The run continues the checkpoint's run (its id, whose checkpoints it replaces and prunes) when it
  // carries the same run.name and writes into the same output directory; another is a branch.
  const CheckpointMetadata written = read_checkpoint_metadata(
      SafetensorsFile::open((*from / "rank-00000.safetensors").string()).metadata(), (*from / "rank-00000.safetensors").string());
  const std::string here = as_json_text(output_dir_at_start_);  // as checkpoint.json records it
  // Whose checkpoints it writes is said only by a run that writes any (zfcore export writes none).
  const bool says = runtime_.comm->rank() == 0 &&
                    (config_.integer("checkpoint", "every") > 0 || config_.boolean("checkpoint", "final"));
  if (written.run_name == run_name_ && !written.run_id.empty() && recorded.output_dir == here)
    run_id_ = written.run_id;
  else if (written.run_name == run_name_ && !written.run_id.empty() && says)
    std::printf("zfcore: %s belongs to the run \"%s\" of the output directory %s; this run (in %s) starts from it "
                "and keeps its own checkpoints: it replaces and prunes only those\n", from->c_str(),
                written.run_name.c_str(), recorded.output_dir.empty() ? "(not recorded)" : recorded.output_dir.c_str(),
                here.c_str());
  else if (!written.run_name.empty() && says)
    std::printf("zfcore: %s belongs to the run \"%s\"; this run (run.name = \"%s\") starts from it and keeps its "
                "own checkpoints\n", from->c_str(), written.run_name.c_str(), run_name_.c_str());
  const std::string bad = non_finite_parameter(loaded.master, identity_.shard_begin, layout_, *runtime_.comm);
  ZF_REQUIRE(bad.empty(), "%s: the saved weight %s is not finite; resume from an earlier checkpoint "
             "(checkpoint.resume = DIR)", from->c_str(), bad.c_str());
  try {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(loaded.rng);
    if (runtime_.device == ZF_DEVICE_CUDA && loaded.device_rng.defined())
      device_generator(runtime_).set_state(loaded.device_rng);
  } catch (const c10::Error &e) {
    throw Error(format("%s: the saved random generator state (rng, device_rng) is not one torch accepts: %s; the "
                       "checkpoint is damaged: resume from an earlier one (checkpoint.resume = DIR)",
                       from->c_str(), e.what_without_backtrace()));
  }
  if (runtime_.comm->rank() == 0)
    std::printf("zfcore: resumed from %s (step %lld)\n", from->c_str(), (long long)loaded.step);
  saved_step_ = loaded.step;
  saved_path_ = *from;
  update.restore(params_shard);
  if (whole_staging.defined()) read_whole_staging(*from, runtime_.comm->rank(), update.waiting(), whole_staging);
  return loaded.step;
}

void TrainingCheckpoints::save_converted(int64_t step, UpdatePlan &update) {
  std::error_code ec;
  if (saved_path_.empty() || std::filesystem::equivalent(saved_path_.parent_path(), store_->directory(), ec)) return;
  converting_ = true;
  save(step, update);
  converting_ = false;
}

}  // namespace zf
