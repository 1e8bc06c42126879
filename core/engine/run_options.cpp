#include "engine/run_options.hpp"

#include "engine/training_checkpoint.hpp"
#include "model/transformer_shape.hpp"
#include "model/zoo.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <tuple>

namespace zf {

RunOptions RunOptions::read(const RunConfig &config) {
  RunOptions o;
  o.seed = uint64_t(config.integer("run", "seed"));
  o.output_dir = config.string("run", "output_dir");
  if (o.output_dir.empty()) o.output_dir = "runs/" + config.string("run", "name");
  o.progress = config.string("run", "progress");
  o.log_every = config.integer("run", "log_every");
  o.wall_clock_breakdown = config.boolean("run", "wall_clock_breakdown");
  o.rank_timers = config.boolean("run", "rank_timers");
  o.tensorboard = config.boolean("run", "tensorboard");
  o.timing_warmup = config.integer("run", "timing_warmup");
  o.host_memory_limit_gb = config.real("run", "host_memory_limit_gb");
  o.comm_timeout_s = config.real("run", "comm_timeout_s");

  o.steps = config.integer("train", "steps");
  o.micro_batch = config.integer("train", "micro_batch");
  o.grad_accum = config.integer("train", "grad_accum");
  o.eval_every = config.integer("train", "eval_every");
  o.eval_batches = config.integer("train", "eval_batches");
  o.clip_grad_norm = config.real("train", "clip_grad_norm");
  o.schedule.kind = config.string("train", "lr_schedule");
  o.schedule.warmup_steps = config.integer("train", "warmup_steps");
  o.schedule.warmup_type = config.string("train", "warmup_type");
  o.schedule.total_steps = config.integer("train", "lr_decay_steps") > 0 ? config.integer("train", "lr_decay_steps") : o.steps;
  o.schedule.min_lr_ratio = config.real("train", "min_lr_ratio");
  o.schedule.warmup_min_ratio = config.real("train", "warmup_min_ratio");
  o.schedule.steps = config.string("train", "lr_schedule_steps");

  o.checkpoint_every = config.integer("checkpoint", "every");
  o.checkpoint_final = config.boolean("checkpoint", "final");
  o.export_hf = config.string("checkpoint", "export_hf");

  o.sample.prompt = config.string("sample", "prompt");
  o.sample.tokens = config.integer("sample", "tokens");
  o.sample.temperature = config.real("sample", "temperature");
  o.sample.top_k = config.integer("sample", "top_k");
  o.sample.context = config.integer("data", "seq_len");
  o.sample.seed = o.seed;

  o.column_major = zf::column_major(config);
  o.interleave_blocks = interleaved_blocks(config);
  o.optimizer = OptimizerSettings{config.real("optimizer", "lr"), config.real("optimizer", "beta1"),
                                  config.real("optimizer", "beta2"), config.real("optimizer", "eps"),
                                  config.real("optimizer", "weight_decay")};
  return o;
}

namespace {

// The export writes model.safetensors, config.json, the tokenizer's files and chat_template.jinja: never
// into the model the run reads (model.init_from) nor a directory inside it, nor into the directory of
// the tokenizer or the chat template it reads (data.tokenizer_path, data.chat_template: often a base
// model's directory). Links in either path are followed: a link to such a directory is that directory.
void require_export_outside_inputs(const RunConfig &config, const std::string &export_hf) {
  std::error_code ec;
  const std::filesystem::path out = std::filesystem::weakly_canonical(std::filesystem::absolute(export_hf, ec), ec);
  const std::tuple<const char *, const char *, bool> inputs[] = {
      {"model", "init_from", true}, {"data", "tokenizer_path", false}, {"data", "chat_template", false}};
  for (const auto &[table, key, or_inside] : inputs) {
    const std::string given = config.string(table, key);
    if (given.empty()) continue;
    std::filesystem::path read = std::filesystem::weakly_canonical(std::filesystem::absolute(given, ec), ec);
    if (!std::filesystem::is_directory(read, ec)) read = read.parent_path();  // a file: its directory
    const bool inside = std::mismatch(read.begin(), read.end(), out.begin(), out.end()).first == read.end();
    if (read.empty() || !(out == read || (or_inside && inside))) continue;
    throw Error(format("%s: checkpoint.export_hf = \"%s\" is %sthe directory of %s.%s = \"%s\" (%s): the export "
                       "would overwrite the files this run reads there (a model.safetensors, config.json, tokenizer "
                       "files); export into a directory of its own, e.g. %s",
                       config.where("checkpoint", "export_hf").str().c_str(), excerpt(export_hf).c_str(),
                       out == read ? "" : "inside ", table, key, excerpt(given).c_str(),
                       config.where(table, key).str().c_str(),
                       (read.parent_path() / (read.filename().string() + "-finetuned")).c_str()));
  }
}

}  // namespace

void check_output_paths(const RunConfig &config, const RunOptions &options, bool export_only) {
  // An export inside a checkpoint directory would go when its checkpoints are replaced or pruned
  // (checked before any directory is created).
  if (!options.export_hf.empty()) {
    std::vector<std::filesystem::path> stores = {checkpoint_dir(config, options.output_dir)};
    const std::string resume = config.string("checkpoint", "resume");
    if (resume != "auto" && resume != "never") stores.push_back(store_of(resume));
    for (const std::filesystem::path &store : stores) {
      const std::string inside = export_dir_problem(options.export_hf, store);
      ZF_REQUIRE(inside.empty(), "%s: checkpoint.export_hf = \"%s\" %s", config.where("checkpoint", "export_hf").str().c_str(),
                 excerpt(options.export_hf).c_str(), inside.c_str());
    }
    const std::string elsewhere = export_into_checkpoints_problem(options.export_hf);  // another run's
    ZF_REQUIRE(elsewhere.empty(), "%s: checkpoint.export_hf = \"%s\" %s",
               config.where("checkpoint", "export_hf").str().c_str(), excerpt(options.export_hf).c_str(),
               elsewhere.c_str());
    require_export_outside_inputs(config, options.export_hf);
    // A user's config.json, weights, a cloned repository: named as the user gave the directory.
    const std::string foreign = export_ownership_problem(options.export_hf);
    ZF_REQUIRE(foreign.empty(), "%s %s",
               export_only ? ("zfcore export: OUT_DIR " + excerpt(options.export_hf)).c_str()
                           : format("%s: checkpoint.export_hf = \"%s\"", config.where("checkpoint", "export_hf").str().c_str(),
                                    excerpt(options.export_hf).c_str()).c_str(),
               foreign.c_str());
  }
  // checkpoint.dir is written on any run (a stop signal saves one), its default inside output_dir.
  const std::string checkpoints = config.string("checkpoint", "dir");
  // Its default, OUTPUT_DIR/checkpoints, is a directory zfcore creates, as it does tensorboard/: a
  // link there (which zfcore did not make) is refused alike, not followed.
  std::error_code link_ec;
  const std::filesystem::path default_store = std::filesystem::path(options.output_dir) / "checkpoints";
  ZF_REQUIRE(!checkpoints.empty() || export_only || !std::filesystem::is_symlink(std::filesystem::symlink_status(
                 default_store, link_ec)),
             "%s is a symbolic link (to %s): zfcore does not write where a link points (as for tensorboard/); to keep "
             "the checkpoints there, set checkpoint.dir = \"%s\" and remove the link", default_store.c_str(),
             std::filesystem::read_symlink(default_store, link_ec).c_str(),
             std::filesystem::weakly_canonical(default_store, link_ec).c_str());
  const std::tuple<const char *, const char *, std::string> keys[] = {
      {"run", "output_dir", options.output_dir}, {"checkpoint", "dir", checkpoints},
      {"checkpoint", "export_hf", options.export_hf}};
  for (const auto &[table, key, dir] : keys) {
    if (dir.empty() || (export_only && std::string(key) != "export_hf")) continue;  // an export writes only there
    // A file of a generated name, created without following links and removed again: nothing of
    // the user's (a link named like a probe) is ever written or removed.
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::string why = ec ? dangling_link_problem(dir) : "";
    if (ec && why.empty()) why = ec.message();
    if (why.empty()) {
      try {
        why = Directory::open(dir, false).writable_problem();
      } catch (const Error &) {
        why = "cannot open it";
      }
    }
    // The default output directory, runs/NAME, comes from run.name: the error points there.
    const bool from_name = std::string(key) == "output_dir" && config.string("run", "output_dir").empty();
    ZF_REQUIRE(why.empty(), "%s: %s.%s = \"%s\"%s: cannot write there (%s); choose a directory this user can write",
               (from_name ? config.where("run", "name") : config.where(table, key)).str().c_str(), table, key,
               excerpt(dir).c_str(), from_name ? " (from run.name)" : "", why.c_str());
  }
  ZF_REQUIRE(options.export_hf.empty() || is_transformer_config(config),
             "%s: checkpoint.export_hf: model.type = \"%s\" has no Hugging Face format (only gpt2, llama and qwen2 "
             "do); remove checkpoint.export_hf", config.where("checkpoint", "export_hf").str().c_str(),
             config.string("model", "type").c_str());
}

}  // namespace zf
