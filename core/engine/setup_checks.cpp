#include "engine/setup_checks.hpp"

#include "config/limits.hpp"
#include "data/sequences.hpp"
#include "data/token_shard.hpp"
#include "model/transformer_shape.hpp"
#include "plugin/memory_entry.hpp"
#include "plugin/plugin_advice.hpp"
#include "plugin/plugin_registry.hpp"
#include "plugin/plugin_set.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "update/zenflow_options.hpp"

#include <algorithm>
#include <filesystem>

namespace zf {

namespace {

const ConfigEntry *entry_of(const PluginSection &section, const char *key) {
  auto found = std::find_if(section.entries.begin(), section.entries.end(),
                            [&](const ConfigEntry &entry) { return entry.key == key; });
  return found == section.entries.end() ? nullptr : &*found;
}

// The files the run reads exist, and the held-out data an evaluation needs is there.
void check_data(const RunConfig &config) {
  const std::string type = config.string("data", "type");
  if (type == "text") data_path(config, "a text file");
  if (type == "tokens") {  // each shard's header (mapped, no id read): a text file given as shards stops here
    const std::string pattern = data_path(config, "a .bin token shard, a directory of them or a glob", false);
    try {
      for (const std::string &path : find_token_shards(pattern)) TokenShard shard(path);
    } catch (const Error &e) {
      throw Error(format("%s: data.path: %s", config.where("data", "path").str().c_str(), e.what()));
    }
  }
  if (type == "alpaca") data_path(config, "an Alpaca JSON file");
  if (type == "chat" || type == "prompt_completion") data_path(config, "a JSON Lines, JSON or Parquet file");
  if (!config.string("data", "eval_path").empty() && type != "tokens") data_path(config, "a file", true, "eval_path");
  ZF_REQUIRE(config.integer("train", "eval_every") == 0 || !config.string("data", "eval_path").empty() ||
                 config.real("data", "eval_fraction") > 0,
             "%s: train.eval_every = %lld but the data has no held-out part; set data.eval_path (a file) or "
             "data.eval_fraction",
             config.where("train", "eval_every").str().c_str(), (long long)config.integer("train", "eval_every"));
}

// The files of init_from that checkpoint.export_hf copies into the export (hf_checkpoint.cpp), checked
// before step 1: one that leads outside init_from (a link) would stop the export after training.
void check_init_from_copies(const RunConfig &config, const std::string &init_from) {
  if (init_from.empty() || config.string("checkpoint", "export_hf").empty()) return;
  std::vector<std::string> names = {"generation_config.json"};
  const std::string type = config.string("data", "type");
  if (config.string("data", "tokenizer") == "byte" && type != "text" && type != "alpaca")  // its tokenizer is exported
    names.insert(names.end(), {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                               "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja"});
  for (const std::string &name : names) {
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(init_from + "/" + name, ec))) continue;
    const std::string outside = path_inside_problem(init_from, name);
    ZF_REQUIRE(outside.empty(), "%s: model.init_from: %s/%s %s; checkpoint.export_hf copies it into the export, and "
               "zfcore reads a model's files only from inside its directory: copy the file there",
               config.where("model", "init_from").str().c_str(), init_from.c_str(), name.c_str(), outside.c_str());
  }
}

// The model's shape from the [model] table and init_from's config.json (no weights read), and
// what the run will do with it.
void check_model(const RunConfig &config, std::vector<std::string> *notes, bool export_only) {
  if (!is_transformer_config(config)) {
    // linear_stack, the default model.type (a config that sets none, or --unset model.type), reads
    // vectors, not tokens: token data would reach it as ids of the wrong shape.
    const std::string data = config.string("data", "type");
    ZF_REQUIRE(config.string("model", "type") != "linear_stack" || data == "random",
               "%s: model.type = \"linear_stack\" (the default where no model.type is set) trains on data.type = "
               "\"random\" only, and data.type = \"%s\" at %s is token data: set model.type (gpt2, llama, qwen2, ...) "
               "or model.preset", config.where("model", "type").str().c_str(), data.c_str(),
               config.where("data", "type").str().c_str());
    for (const char *key : {"preset", "init_from"})
      ZF_REQUIRE(config.string("model", key).empty() || config.string("model", "type") != "linear_stack",
                 "%s: model.%s does not apply to model.type = \"linear_stack\"",
                 config.where("model", key).str().c_str(), key);
    ZF_REQUIRE(config.string("checkpoint", "export_hf").empty(),
               "%s: checkpoint.export_hf: model.type = \"%s\" has no Hugging Face format (only gpt2, llama and qwen2 "
               "do); remove checkpoint.export_hf", config.where("checkpoint", "export_hf").str().c_str(),
               config.string("model", "type").c_str());
    return;
  }
  const TransformerOptions options = transformer_options(config);
  check_init_from_copies(config, options.init_from);
  // GPT-2's learned positions end at max_seq: a longer sequence would stop the run at its first step
  // (an export reads no data).
  const int64_t seq_len = config.integer("data", "seq_len");
  const bool fixed = !options.init_from.empty();
  ZF_REQUIRE(export_only || !options.shape.is_gpt2() || seq_len <= options.shape.max_seq,
             "%s: data.seq_len = %lld exceeds GPT-2's position table (%s = %lld): set data.seq_len to at most %lld%s",
             config.where("data", "seq_len").str().c_str(), (long long)seq_len,
             fixed ? "n_positions in model.init_from's config.json" : "model.max_seq", (long long)options.shape.max_seq,
             (long long)options.shape.max_seq, fixed ? "" : " or raise model.max_seq");
  // The byte tokenizer's ids are the 256 bytes and EOS (256): a larger vocabulary trains embeddings
  // no id reaches. (A model of vocab 256 trains on text as well; its export's tokenizer has no EOS.)
  const std::string type = config.string("data", "type");
  if ((type == "text" || type == "alpaca") && config.string("data", "tokenizer") == "byte" &&
      options.shape.vocab > 257 && notes)  // a smaller one: the text's ids are checked
    notes->push_back(format("%s: data.tokenizer = \"byte\" gives 257 ids (the 256 bytes and EOS), and the model has "
                            "a vocabulary of %lld (model.preset, init_from or model.vocab): %lld embeddings are never "
                            "trained. Use the model's tokenizer (data.tokenizer = \"hf\" or \"sentencepiece\" with "
                            "data.tokenizer_path), or a model of vocab = 257 for byte-level text (--set model.vocab=257)",
                            config.where("data", "tokenizer").str().c_str(), (long long)options.shape.vocab,
                            (long long)(options.shape.vocab - 257)));
}

// [zenflow] chooses what the device updates and needs the master weights in host memory; the
// offload keys that choose otherwise are named where they are written, with the fix.
void check_zenflow_offload(const RunConfig &config, PluginRegistry &registry) {
  if (!config.has_table("zenflow")) return;
  const PluginSection &offload = config.plugin(ZF_KIND_OFFLOAD);
  if (const ConfigEntry *ratio = entry_of(offload, "ratio")) {
    const bool whole = std::holds_alternative<double>(ratio->value) && std::get<double>(ratio->value) == 1.0;
    const bool whole_int = std::holds_alternative<int64_t>(ratio->value) && std::get<int64_t>(ratio->value) == 1;
    ZF_REQUIRE(whole || whole_int,
               "%s: offload.ratio = %s and [zenflow] both choose what the device updates: ZenFlow keeps the selected "
               "columns there; drop offload.ratio (--unset offload.ratio)",
               ratio->where.str().c_str(), value_to_string(ratio->value).c_str());
  }
  if (const ConfigEntry *params = entry_of(offload, "offload_params")) {
    const bool on = std::holds_alternative<bool>(params->value) && std::get<bool>(params->value);
    ZF_REQUIRE(!on,
               "%s: offload.offload_params = true keeps the working parameters in host memory, but [zenflow] updates "
               "the selected columns where the model computes every step: drop it (--unset offload.offload_params)",
               params->where.str().c_str());
  }
  // The offload plugin moves gradients out and parameters in, as keeping the master weights in
  // host memory needs, and keeps the working parameters where the model computes, as its
  // estimate_memory says with the config's table (each candidate installed here; one without an
  // estimate is refused when the run plans it, update/zenflow.cpp).
  const PluginNeeds usable{0, kMovesData, nullptr, kParamsOnHost};
  for (const std::string &name : candidates_here(offload, registry, nullptr)) {
    std::unique_ptr<PluginConfig> table;
    const PluginFile &file = resolve_plugin(offload, name, registry, &table);
    ZF_REQUIRE(plugin_traits(*file.descriptor) & kMovesData,
               "%s: [zenflow] updates the unselected columns on the CPU, so it needs an offload plugin that keeps the "
               "master weights in host memory and moves gradients and parameters (%s), not '%s' (offload.plugin)",
               offload.where.str().c_str(), installed_with(registry, ZF_KIND_OFFLOAD, usable).c_str(), name.c_str());
    ZF_REQUIRE(!params_on_host(file, *table),
               "%s: offload plugin '%s' keeps the working parameters in host memory, but [zenflow] updates the "
               "selected columns where the model computes every step: use an offload plugin that keeps them there "
               "and the master weights in host memory (%s)",
               offload.where.str().c_str(), name.c_str(), installed_with(registry, ZF_KIND_OFFLOAD, usable).c_str());
  }
}

// The optimizer runs where the offload keeps the master weights, and holds its state where the
// offload needs it held. Checked for each offload candidate installed here against the optimizer the
// run takes: the first candidate that does not decline (a GPU-only optimizer declines on a CPU run,
// so ["gpu_adam", "cpu_adam"] is cpu_adam there). A fallback behind it never runs, so what it lacks
// does not matter: ["cpu_adam", "adamw_ref"] takes nvme or ZenFlow as cpu_adam does.
void check_optimizer_offload(const RunConfig &config, PluginRegistry &registry) {
  const PluginSection &optimizers = config.plugin(ZF_KIND_OPTIMIZER), &offloads = config.plugin(ZF_KIND_OFFLOAD);
  const bool gpu = config.string("run", "device") == "cuda";
  const bool low_precision = config.string("model", "dtype") != "float32";
  const ConfigEntry *ratio = entry_of(offloads, "ratio");
  const bool split = ratio && !(std::holds_alternative<double>(ratio->value) && std::get<double>(ratio->value) == 1.0) &&
                     !(std::holds_alternative<int64_t>(ratio->value) && std::get<int64_t>(ratio->value) == 1);
  const std::string where_text = optimizers.where.str();
  const char *where = where_text.c_str();
  auto host_optimizers = [&](uint32_t traits) {
    return installed_with(registry, ZF_KIND_OPTIMIZER,
                          {uint64_t(ZF_CAP_CPU) | (low_precision ? uint64_t(ZF_CAP_LOW_PRECISION_OUT) : 0), traits, nullptr});
  };
  for (const std::string &offload_name : candidates_here(offloads, registry, nullptr)) {
    const zf_descriptor &offload = *resolve_plugin(offloads, offload_name, registry, nullptr).descriptor;
    const bool on_host = plugin_traits(offload) & kMovesData;  // the master weights in host memory
    for (const std::string &name : candidates_here(optimizers, registry, nullptr)) {
      const zf_descriptor &optimizer = *resolve_plugin(optimizers, name, registry, nullptr).descriptor;
      const uint64_t caps = optimizer.capabilities;
      if (!gpu && !(caps & ZF_CAP_CPU)) continue;  // declines on a CPU run
      if (!on_host) break;  // the master where the model computes: checked below
      ZF_REQUIRE(caps & ZF_CAP_CPU,
                 "%s: optimizer plugin '%s' runs on the GPU but offload plugin '%s' keeps the master weights in host "
                 "memory: use a CPU optimizer (%s)", where, name.c_str(), offload_name.c_str(), host_optimizers(0).c_str());
      ZF_REQUIRE(!low_precision || (caps & ZF_CAP_LOW_PRECISION_OUT),
                 "%s: optimizer plugin '%s' cannot write %s parameters in its step (ZF_CAP_LOW_PRECISION_OUT), which "
                 "offload plugin '%s' needs: use one that can (%s)", where, name.c_str(),
                 config.string("model", "dtype").c_str(), offload_name.c_str(), host_optimizers(0).c_str());
      const bool held = plugin_traits(optimizer) & kHostHeldState;
      const std::string moves = (offload.capabilities & ZF_CAP_NVME)
                                    ? format("offload plugin '%s' puts the optimizer state on disk", offload_name.c_str())
                                : config.has_table("zenflow")
                                    ? std::string("[zenflow] moves each column's optimizer state between the host and "
                                                  "the device")
                                : split ? std::string("offload.ratio < 1 moves the device part's optimizer state between "
                                                      "the host and the device")
                                        : std::string();
      ZF_REQUIRE(moves.empty() || held,
                 "%s: %s, so the host must hold it: optimizer plugin '%s' keeps its own (use one that lets the host "
                 "hold it: %s)", where, moves.c_str(), name.c_str(), host_optimizers(kHostHeldState).c_str());
      break;  // the one the run takes
    }
    // A GPU run whose offload keeps the master weights on the GPU updates there: a list of only CPU
    // optimizers cannot (told from the descriptors: no GPU needed to check it).
    if (on_host || !gpu) continue;
    const std::vector<std::string> names = candidates_here(optimizers, registry, nullptr);
    const bool any_gpu = std::any_of(names.begin(), names.end(), [&](const std::string &name) {
      return resolve_plugin(optimizers, name, registry, nullptr).descriptor->capabilities & ZF_CAP_CUDA;
    });
    ZF_REQUIRE(names.empty() || any_gpu,
               "%s: optimizer plugin '%s' runs on the CPU but run.device = \"cuda\" keeps the master weights on the "
               "GPU: use a GPU optimizer (%s), or, to update on the CPU, an offload plugin that keeps the master "
               "weights in host memory and moves gradients and parameters (%s)",
               where, names.front().c_str(), installed_with(registry, ZF_KIND_OPTIMIZER, {ZF_CAP_CUDA}).c_str(),
               installed_with(registry, ZF_KIND_OFFLOAD, {0, kMovesData}).c_str());
  }
}

}  // namespace

void check_before_setup(const RunConfig &config, PluginRegistry &registry, std::vector<std::string> *notes,
                        bool export_only) {
  ZenFlowOptions::read(config, 1);  // its keys and their combinations
  if (!export_only) check_data(config);
  check_model(config, notes, export_only);
  check_plugin_tables(config, registry, notes);
  check_zenflow_offload(config, registry);
  check_optimizer_offload(config, registry);
  // Last: validate has checked the rest of the config when it says this.
  ZF_REQUIRE(config.string("run", "device") != "cuda" || cuda_built(),
             "%s: run.device = \"cuda\": this zfcore was built without the CUDA path; rebuild with -DZF_CUDA=ON (CUDA "
             "toolkit, NCCL and a CUDA libtorch), or set run.device = \"cpu\"",
             config.where("run", "device").str().c_str());
}

}  // namespace zf
