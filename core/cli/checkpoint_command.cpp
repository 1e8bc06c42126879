// zfcore checkpoint verify DIR: the checks a resume makes on a checkpoint (its files, their
// headers and metadata, every tensor against its checksum), without training.
// zfcore checkpoint info DIR: what a checkpoint holds (step, run, layout, tensors), from its headers
// alone (nothing of the tensor data is read).
#include "checkpoint/checkpoint.hpp"
#include "checkpoint/reshard.hpp"
#include "cli/commands.hpp"
#include "engine/resume_layout.hpp"
#include "engine/training_checkpoint.hpp"
#include "runtime/input.hpp"

#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace zf {
namespace fs = std::filesystem;

namespace {

// What resuming the checkpoint on another layout keeps exact and what it changes (docs/checkpoints.md).
void print_layout_changes(CheckpointShards &shards, const RecordedRun &run, const fs::path &checkpoint) {
  std::string exact = "the fp32 master and every optimizer tensor (bit for bit, each rank reading the ranges of its "
                      "own shard), the step and its learning rate";
  const bool zenflow = shards.has("optimizer.zenflow.counters");
  if (shards.has("optimizer.offload.ratio")) exact += ", offload.ratio = \"auto\"'s share";
  if (zenflow) exact += ", ZenFlow's selection, counters and per-element state (sums, staging, working parameters)";
  std::printf("on another layout (ranks, stage, offload tier, offload.ratio, ZenFlow on or off)\n");
  std::printf("  exact         %s\n", exact.c_str());
  std::printf("  ranks         the order in which each step's gradients are summed (other ranks and micro-steps: the "
              "last bits); the global batch%s is kept with checkpoint.resume_batch = \"keep\" (the data order "
              "continues exactly) or changed with \"new\"; rank r continues rank r's random generators, new ranks "
              "rank 0's\n", run.global_batch() > 0 ? format(" %lld", (long long)run.global_batch()).c_str() : "");
  if (!zenflow) {
    std::printf("  ZenFlow       none in the checkpoint: a run with [zenflow] selects its columns at the first step\n");
    return;
  }
  const bool staggered = shards.has("optimizer.zenflow.groups");
  const std::string owed = zenflow_owed(checkpoint);
  std::printf("  ZenFlow       %s schedule; %s\n", staggered ? "staggered" : "deepspeed",
              owed.empty() ? "owes no CPU update: resumes with or without ZenFlow"
                           : (owed + ": resumes only with [zenflow] and the same schedule").c_str());
  if (staggered && !owed.empty())
    std::printf("                the owed updates are applied at the first step over the writer's groups, then the "
                "groups are the new layout's: exact against its own layout when every step selects "
                "(select_strategy = \"step\", select_interval = 1)%s\n",
                shards.has("optimizer.zenflow.group_bounds") ? "" : "; this checkpoint does not record its groups "
                "(an older zfcore): it resumes on its own layout only");
  else if (staggered)
    std::printf("                the groups are the new layout's, continuing the writer's CPU update counts\n");
  else
    std::printf("                the schedule's sums and counters are the run's: exact against its own layout\n");
}

int checkpoint_info(const fs::path &checkpoint) {
  CheckpointShards shards = CheckpointShards::open(checkpoint);
  const CheckpointMetadata &m = shards.metadata();
  std::printf("checkpoint    %s\n", checkpoint.c_str());
  std::printf("step          %lld\n", (long long)m.step);
  std::printf("run           %s\n", m.run_name.empty() ? "(not recorded: written by an older zfcore)"
                                                        : format("\"%s\" (id %s)", m.run_name.c_str(), m.run_id.c_str()).c_str());
  std::printf("config digest %s\n", m.config_digest.empty() ? "(not recorded)" : m.config_digest.c_str());
  std::printf("layout digest %s\n", m.layout.c_str());
  const RecordedRun run = read_recorded_run(checkpoint);
  if (!run.stage.empty())
    std::printf("trained by    stage %s, offload %s, ZenFlow %s, optimizer %s; global batch %lld (micro_batch %lld "
                "x grad_accum %lld x %lld ranks)\n", run.stage.c_str(), run.offload.c_str(), run.zenflow ? "on" : "off",
                run.optimizer.c_str(), (long long)run.global_batch(), (long long)run.micro_batch,
                (long long)run.grad_accum, (long long)run.world_size);
  std::string text;
  const std::string json = (checkpoint / "checkpoint.json").string();
  const std::string record = checkpoint_record_problem(checkpoint);
  if (!record.empty()) std::printf("recorded      DAMAGED: %s\n", record.c_str());
  else if (read_regular_file(json, 1 << 20, &text).empty()) std::printf("recorded      %s", text.c_str());
  std::printf("world size    %d ranks; shards:", shards.world_size());
  for (int r = 0; r < shards.world_size(); ++r)
    std::printf(" [%llu, %llu)", (unsigned long long)shards.metadata(r).shard_begin,
                (unsigned long long)shards.metadata(r).shard_end);
  std::printf("\ntensors       (bytes summed over the rank files)\n");
  bool blocks = true, whole = true;
  for (const std::string &name : shards.file(0).names()) {
    uint64_t bytes = 0;
    for (int r = 0; r < shards.world_size(); ++r) {
      if (!shards.file(r).has(name)) continue;
      bytes += shards.file(r).bytes(name).second;
      blocks = blocks && !shards.file(r).block_checksums(name).empty();
      whole = whole && !shards.file(r).checksum(name).empty();
    }
    std::printf("  %-28s %-5s %14llu bytes  %s\n", name.c_str(), shards.file(0).info(name).dtype_name.c_str(),
                (unsigned long long)bytes, shards.per_element(name) ? "per element of the shards" : "per rank");
  }
  std::printf("checksums     %s; metadata %s (zfcore checkpoint verify checks them all)\n",
              blocks ? "per tensor and per block" : whole ? "per tensor" : "none (written by an older zfcore)",
              m.run_id.empty() ? "without checksum" : "checksummed");
  print_layout_changes(shards, run, checkpoint);
  return 0;
}

}  // namespace

namespace {
// What makes a run an export: resume CHECKPOINT, train none, write OUT_DIR only.
std::vector<std::string> export_settings(const fs::path &checkpoint, int64_t step, const std::string &out) {
  return {"checkpoint.resume=" + checkpoint.string(), "train.steps=" + std::to_string(step),
          "checkpoint.export_hf=" + out,             "checkpoint.final=false",
          "checkpoint.every=0",                      "checkpoint.resume_batch=new"};
}
}  // namespace

int command_export(const std::vector<std::string> &args) {
  if (args.size() < 2 || args[0].rfind("--", 0) == 0 || args[1].rfind("--", 0) == 0)
    throw UsageError("expected: zfcore export CHECKPOINT OUT_DIR [FILE] [--set table.key=value]... (CHECKPOINT a "
                     "step-N directory, FILE the run's config: by default the one its checkpoint.json names)");
  const fs::path checkpoint = args[0];
  ZF_REQUIRE(fs::is_directory(checkpoint), "zfcore export: CHECKPOINT %s: no such checkpoint directory",
             checkpoint.c_str());
  require_one_checkpoint(checkpoint.string(), "zfcore export: CHECKPOINT " + checkpoint.string(), false);
  // OUT_DIR is checked here, where the user typed it (the run would name checkpoint.export_hf).
  const fs::path out = args[1];
  std::error_code ec;
  const fs::file_status out_status = fs::status(out, ec);
  ZF_REQUIRE(!fs::exists(out_status) || fs::is_directory(out_status), "zfcore export: OUT_DIR %s exists and is not a "
             "directory: give the directory to export into (it is created when missing)", out.c_str());
  std::string inside = export_dir_problem(out, store_of(checkpoint));
  if (inside.empty()) inside = export_into_checkpoints_problem(out);  // another run's checkpoints
  ZF_REQUIRE(inside.empty(), "zfcore export: OUT_DIR %s %s", out.c_str(), inside.c_str());
  const int64_t step = CheckpointShards::open(checkpoint).metadata().step;
  std::vector<std::string> run(args.begin() + 2, args.end());
  const RecordedRun recorded_run = read_recorded_run(checkpoint);
  const bool no_file = run.empty() || run[0].rfind("--", 0) == 0;
  if (no_file && recorded_run.has_config) {  // the config the checkpoint records: no file needed
    // Read as its run read it: relative paths (data.path, ...) from the directory the run started in.
    const fs::path at = fs::absolute(checkpoint), out_dir = fs::absolute(args[1]);
    std::error_code moved;
    if (!recorded_run.config_directory.empty() && fs::is_directory(recorded_run.config_directory, moved))
      fs::current_path(recorded_run.config_directory, moved);
    std::vector<std::string> export_args{(at / "checkpoint.json").string() + " (the config its run recorded)"};
    for (const std::string &set : recorded_run.config_set) export_args.insert(export_args.end(), {"--set", set});
    for (const std::string &unset : recorded_run.config_unset) export_args.insert(export_args.end(), {"--unset", unset});
    export_args.insert(export_args.end(), run.begin(), run.end());  // the command's own --set last
    for (const std::string &set : export_settings(at, step, out_dir.string()))
      export_args.insert(export_args.end(), {"--set", set});
    RunArgs parsed = parse_run_args(export_args, "export");
    parsed.text = recorded_run.config_text;
    return command_run(parsed, /*export_only=*/true);
  }
  if (no_file) {  // an older zfcore's checkpoint: the config file its run recorded
    const std::string recorded = recorded_run.config;
    std::error_code ec;
    // A relative path (an older zfcore's record) was relative to where that run started, which is
    // not recorded: read from here it could be another file.
    ZF_REQUIRE(recorded.empty() || fs::path(recorded).is_absolute(),
               "%s/checkpoint.json names the config \"%s\" relative to the directory its run started in, which it "
               "does not record: give the run's config, zfcore export %s %s FILE [--set ...]", checkpoint.c_str(),
               excerpt(recorded).c_str(), checkpoint.c_str(), args[1].c_str());
    ZF_REQUIRE(!recorded.empty() && fs::is_regular_file(recorded, ec),
               "%s/checkpoint.json names the config \"%s\", which is not a file here: give the run's config, "
               "zfcore export %s %s FILE [--set ...]", checkpoint.c_str(), excerpt(recorded).c_str(),
               checkpoint.c_str(), args[1].c_str());
    run.insert(run.begin(), recorded);
  }
  for (const std::string &set : export_settings(checkpoint, step, args[1])) {
    run.push_back("--set");
    run.push_back(set);
  }
  return command_run(run, /*export_only=*/true);
}

int command_checkpoint(const std::vector<std::string> &args) {
  if (args.size() != 2 || (args[0] != "verify" && args[0] != "info"))
    throw UsageError("expected: zfcore checkpoint verify DIR (a checkpoint, a checkpoint directory or a run's "
                     "output directory), or zfcore checkpoint info DIR (a checkpoint)");
  const fs::path dir = args[1];
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);  // links followed; a loop is an error, not a throw
  ZF_REQUIRE(!ec || ec.value() != ELOOP,
             "%s: a link that leads back to itself (a link loop): give the checkpoint's real directory", dir.c_str());
  ZF_REQUIRE(!ec || ec.value() == ENOENT, "%s: cannot be read: %s", dir.c_str(), ec.message().c_str());
  ZF_REQUIRE(fs::exists(status), "%s: no such file or directory", dir.c_str());
  ZF_REQUIRE(fs::is_directory(status), "%s is a file, not a directory: give a checkpoint (its step-N directory), a "
             "checkpoint directory or a run's output directory", dir.c_str());
  if (args[0] == "info") {
    require_one_checkpoint(dir.string(), "zfcore checkpoint info: " + dir.string(), false);
    return checkpoint_info(dir);
  }
  std::vector<fs::path> checkpoints;
  if (fs::exists(dir / "checkpoint.json")) checkpoints = {dir};
  if (checkpoints.empty()) checkpoints = checkpoints_in(dir);
  if (checkpoints.empty()) checkpoints = checkpoints_in(dir / "checkpoints");
  ZF_REQUIRE(!checkpoints.empty(), "%s holds no checkpoint (step-N directories with a checkpoint.json, or a run's "
             "checkpoints/ directory)", dir.c_str());
  int damaged = 0;
  for (const fs::path &checkpoint : checkpoints) {
    const std::string damage = checkpoint_damage(checkpoint);
    if (!damage.empty()) {
      ++damaged;
      std::printf("%s: damaged: %s\n", checkpoint.c_str(), damage.c_str());
    } else if (!SafetensorsFile::open((checkpoint / "rank-00000.safetensors").string()).has_checksums()) {
      std::printf("%s: readable, without checksums (written by an older zfcore: only its structure was checked)\n",
                  checkpoint.c_str());
    } else {
      std::printf("%s: ok\n", checkpoint.c_str());
    }
  }
  std::printf("%zu checkpoint(s), %d damaged\n", checkpoints.size(), damaged);
  return damaged ? 1 : 0;
}

}  // namespace zf
