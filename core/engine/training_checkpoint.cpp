#include "engine/training_checkpoint.hpp"

#include "engine/engine.hpp"
#include "runtime/error.hpp"
#include "runtime/json.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <cstring>

namespace zf {

std::string layout_digest(const zf_layout &layout) {
  uint64_t state = kDigestSeed;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    state = digest_bytes(seg.name, std::strlen(seg.name), state);
    uint64_t fields[5] = {seg.offset, seg.rows, seg.cols, seg.block, seg.flags};
    state = digest_bytes(fields, sizeof fields, state);
  }
  return format("%016llx", (unsigned long long)state);
}

namespace {
std::string checkpoint_dir(const RunConfig &config, const std::string &output_dir) {
  std::string dir = config.string("checkpoint", "dir");
  return dir.empty() ? output_dir + "/checkpoints" : dir;
}

at::Generator device_generator(const Runtime &runtime) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, c10::DeviceIndex(runtime.device_index)));
}
}  // namespace

TrainingCheckpoints::TrainingCheckpoints(const RunConfig &config, const std::string &output_dir, Runtime &runtime,
                                         const zf_layout &layout, RunIdentity identity)
    : config_(config), runtime_(runtime), output_dir_(output_dir), layout_digest_(layout_digest(layout)), identity_(std::move(identity)) {
  store_ = std::make_unique<CheckpointStore>(checkpoint_dir(config, output_dir), config.integer("checkpoint", "keep"),
                                             *runtime.comm);
}

TrainingState TrainingCheckpoints::state(int64_t step, UpdatePlan &update) const {
  TrainingState state;
  state.step = step;
  state.shard_begin = identity_.shard_begin;
  state.shard_end = identity_.shard_end;
  state.layout_digest = layout_digest_;
  state.master = update.master;
  state.optimizer = update.state_tensors();
  state.optimizer_pieces = update.state_pieces();
  state.rng = at::detail::getDefaultCPUGenerator().get_state();
  if (runtime_.device == ZF_DEVICE_CUDA) state.device_rng = device_generator(runtime_).get_state();
  return state;
}

std::string TrainingCheckpoints::info(int64_t step) const {
  JsonWriter json;
  json.begin_object().key("step").value(step).key("world_size").value(runtime_.comm->world_size());
  json.key("config").value(identity_.config_file).key("layout").value(layout_digest_);
  json.key("optimizer").value(identity_.optimizer);
  json.key("stage").value(identity_.stage).end_object();
  return json.str();
}

void TrainingCheckpoints::save(int64_t step, UpdatePlan &update) {
  auto path = store_->save(state(step, update), info(step));
  if (runtime_.comm->rank() == 0) std::printf("zfcore: checkpoint %s\n", path.c_str());
}

std::optional<std::filesystem::path> checkpoint_to_resume(const RunConfig &config, const std::string &output_dir,
                                                          Communicator &comm) {
  std::string resume = config.string("checkpoint", "resume");
  if (resume == "never") return std::nullopt;
  if (resume == "auto") return CheckpointStore(checkpoint_dir(config, output_dir), 1, comm).latest();
  ZF_REQUIRE(std::filesystem::exists(resume), "%s: checkpoint.resume = \"%s\": no such checkpoint directory",
             config.where("checkpoint", "resume").str().c_str(), resume.c_str());
  return std::filesystem::path(resume);
}

int64_t TrainingCheckpoints::resume(UpdatePlan &update) {
  std::optional<std::filesystem::path> from = checkpoint_to_resume(config_, output_dir_, *runtime_.comm);
  if (!from) return 0;
  TrainingState loaded = state(0, update);
  store_->load(*from, loaded);
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
  return loaded.step;
}

}  // namespace zf
