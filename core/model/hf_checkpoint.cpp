#include "model/hf_checkpoint.hpp"

#include "model/param_source.hpp"

#include "checkpoint/checkpoint_directory.hpp"
#include "checkpoint/safetensors.hpp"
#include "config/config.hpp"
#include "model/family.hpp"
#include "model/transformer.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/files_interrupted.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <filesystem>
#include <memory>
#include <set>

namespace zf {
namespace {

constexpr uint64_t kMaxHfJsonBytes = 16 << 20;          // config.json, generation_config.json
constexpr uint64_t kMaxTokenizerFileBytes = 1ull << 30;  // what hf_tokenizer reads too

TransformerModel &transformer(Model &model) {
  auto *t = dynamic_cast<TransformerModel *>(&model);
  ZF_REQUIRE(t, "model.type = \"%s\" has no Hugging Face format (only the transformers do: %s)",
             model.name().c_str(), family_names().c_str());
  return *t;
}

// The export's files, each written to a temporary of this process; committed together at the end.
using PendingFiles = std::vector<std::unique_ptr<PendingFile>>;

void add_text_file(PendingFiles &files, const Directory &directory, const std::string &name, const std::string &text) {
  files.push_back(std::make_unique<PendingFile>(directory, name));
  files.back()->write(text);
}

// The source checkpoint's config.json, which describes this model (init_from checked that): every
// key as the source wrote it, but for the dtype the export stores and the dropout when this run set
// model.dropout.
nlohmann::json keep_source_fields(const nlohmann::json &rebuilt, const std::string &source, double dropout) {
  std::string path = source + "/config.json";
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return rebuilt;
  nlohmann::json merged = read_json_file(path, kMaxHfJsonBytes);
  const std::set<std::string> dropouts = {"resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"};
  auto keep = [&](const nlohmann::json &from, nlohmann::json &into) {
    for (const auto &[key, value] : from.items())
      if (key == "dtype" || key == "torch_dtype" || (dropouts.count(key) && dropout > 0)) into[key] = value;
  };
  keep(rebuilt, merged);
  // An image-text checkpoint's language model: the dtype the export stores, where its text_config names one.
  if (rebuilt.contains("text_config") && merged.contains("text_config") && merged["text_config"].is_object()) {
    nlohmann::json text = rebuilt["text_config"];
    for (const char *key : {"dtype", "torch_dtype"})
      if (merged["text_config"].contains(key)) text[key] = rebuilt[key];
    keep(text, merged["text_config"]);
  }
  return merged;
}

// generation_config.json: the source checkpoint's when it has one (read through the input rule:
// a regular file, its size and nesting bounded), else its token ids.
std::string generation_config(const nlohmann::json &config, const std::string &source) {
  std::string path = source + "/generation_config.json";
  nlohmann::json generation = {{"_from_model_config", true}};
  std::error_code ec;
  if (!source.empty() && std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
    const std::string outside = path_inside_problem(source, "generation_config.json");
    ZF_REQUIRE(outside.empty(), "%s %s; zfcore reads a model's files only from inside its directory: copy the file "
               "there", path.c_str(), outside.c_str());
    generation = read_json_file(path, kMaxHfJsonBytes);
  } else {
    for (const char *key : {"bos_token_id", "eos_token_id", "pad_token_id"})
      if (config.contains(key) && !config[key].is_null()) generation[key] = config[key];
  }
  return generation.dump(2) + "\n";
}

// The files transformers' AutoTokenizer reads, those of them that the directory `from` has, read
// through the input rule (a FIFO or a device named like one is refused, not read). Where `from` is a
// file (data.tokenizer_path named one), the files zfcore read: it, as tokenizer.json (tokenizer.model
// for a SentencePiece model), and the tokenizer_config.json beside it; never other files beside it,
// which may be another model's. Without `with_template`, no chat_template.jinja (the run trained with
// another, which the export writes).
void copy_tokenizer_files(std::string from, const Directory &directory, PendingFiles &files, bool with_template) {
  std::vector<std::pair<std::string, std::string>> names;  // in `from`, in the export
  for (const char *name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                           "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja"})
    if (with_template || std::string(name) != "chat_template.jinja") names.emplace_back(name, name);
  std::error_code ec;
  if (!std::filesystem::is_directory(from, ec)) {
    const std::filesystem::path file = from;
    const bool sentencepiece = file.extension() == ".model";
    from = file.has_parent_path() ? file.parent_path().string() : ".";
    names = {{file.filename().string(), sentencepiece ? "tokenizer.model" : "tokenizer.json"},
             {"tokenizer_config.json", "tokenizer_config.json"}};
  }
  for (const auto &[name, exported] : names) {
    std::string source = from + "/" + name;
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(source, ec))) continue;
    const std::string outside = path_inside_problem(from, name);  // not copied from outside into the export
    ZF_REQUIRE(outside.empty(), "%s %s; zfcore reads a model's files only from inside its directory: copy the file "
               "there", source.c_str(), outside.c_str());
    std::string text;
    std::string why = read_regular_file(source, kMaxTokenizerFileBytes, &text);
    ZF_REQUIRE(why.empty(), "%s: cannot copy it into the export %s: %s", source.c_str(), directory.path().c_str(),
               why.c_str());
    add_text_file(files, directory, exported, text);
  }
}

// The fp32 master of parameter `name` in the model's shape (column-contiguous weights transposed back).
torch::Tensor master_of(const torch::Tensor &master, const zf_layout &layout, const std::string &name,
                        const torch::Tensor &like) {
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (name != seg.name) continue;
    torch::Tensor flat = master.narrow(0, int64_t(seg.offset), int64_t(seg.numel));
    return segment_view(flat, seg, like.sizes());
  }
  throw Error(format("internal: parameter '%s' is not in the layout of the master weights", name.c_str()));
}

torch::Dtype export_dtype(const TransformerModel &t, const HfExportOptions &options) {
  if (options.dtype == "auto") return t.dtype();
  ZF_REQUIRE(options.dtype == "float32" || options.dtype == "bfloat16",
             "checkpoint.export_dtype = \"%s\": expected auto, float32 or bfloat16", options.dtype.c_str());
  return options.dtype == "float32" ? torch::kFloat32 : torch::kBFloat16;
}

}  // namespace

HfExportOptions hf_export_options(const RunConfig &config, const torch::Tensor &master, const zf_layout *layout) {
  HfExportOptions options;
  options.dtype = config.string("checkpoint", "export_dtype");
  options.init_from = config.string("model", "init_from");
  options.master = master;
  options.layout = layout;
  std::string tokenizer = config.string("data", "tokenizer");
  std::string type = config.string("data", "type");
  if (tokenizer != "byte") {
    // data.tokenizer_path names the file or the directory holding it: a file is exported with the
    // tokenizer_config.json beside it only (copy_tokenizer_files).
    options.tokenizer_dir = config.string("data", "tokenizer_path");
  } else if (type != "text" && type != "alpaca") {
    options.tokenizer_dir = options.init_from;  // pre-tokenized data: the checkpoint's own tokenizer
  }
  return options;
}

namespace {
// An image-text checkpoint's tensors outside its language model (the vision tower, multi-token
// prediction), which zfcore does not train: copied unchanged from model.init_from, as stored there.
void pass_through_frozen(const TransformerModel &t, const HfExportOptions &options, std::set<std::string> used,
                         std::vector<std::pair<std::string, at::Tensor>> &tensors) {
  const Family *family = find_family(t.shape().type);
  if (!family || !family->image_text()) return;
  ZF_REQUIRE(!options.init_from.empty(),
             "a %s model exports only with the checkpoint it started from (model.init_from), whose vision tower the "
             "export copies", t.name().c_str());
  const SafetensorsSet source = SafetensorsSet::open_directory(options.init_from);
  const std::vector<std::string> heads = hf_tensor_names(t.shape().type, "lm_head.weight");
  if (t.shape().tie_embeddings) used.insert(heads.begin(), heads.end());  // the tied head is the embedding
  size_t copied = 0;
  for (const std::string &name : source.names())
    if (!used.count(name) && !used.count("model." + name)) {  // (a base model's checkpoint lacks "model.")
      tensors.emplace_back(name, source.load(name));
      ++copied;
    }
  log_info(format("the export copies %zu frozen tensors outside the language model (the vision tower) unchanged "
                  "from %s", copied, options.init_from.c_str()));
}

// Qwen3.5-MoE's fused expert tensors (fused_experts.hpp), written piece by piece from the parameters
// they hold, in their order in the tensor (by expert, then gate rows before up rows), converted to
// `dtype` one piece at a time: the export never holds a second copy of the experts.
using FusedParts = std::map<std::string, std::vector<std::pair<FusedSlice, torch::Tensor>>>;
std::vector<TensorPieces> fused_pieces(FusedParts &parts, torch::Dtype dtype) {
  std::vector<TensorPieces> pieces;
  for (auto &[name, slices] : parts) {
    std::sort(slices.begin(), slices.end(), [](const auto &a, const auto &b) {
      return std::pair(a.first.index, a.first.row0) < std::pair(b.first.index, b.first.row0);
    });
    const std::vector<int64_t> &shape = slices.front().first.shape;
    const uint64_t numel = uint64_t(shape[0] * shape[1] * shape[2]), piece = uint64_t(slices.front().second.numel());
    ZF_REQUIRE(piece * slices.size() == numel, "internal: fused tensor '%s' gets %zu parts of %llu elements",
               name.c_str(), slices.size(), (unsigned long long)piece);
    const std::vector<std::pair<FusedSlice, torch::Tensor>> *held = &slices;
    auto read = [held, piece, dtype](uint64_t first, uint64_t count, void *out) {
      const torch::Tensor value = (*held)[first / piece].second.to(torch::kCPU, dtype).contiguous();
      std::memcpy(out, value.data_ptr(), count * c10::elementSize(dtype));
    };
    pieces.push_back(TensorPieces{name, dtype, numel, piece, read, {}, shape});
  }
  return pieces;
}

void write_hf_files(Model &model, const std::string &directory, const HfExportOptions &options) {
  TransformerModel &t = transformer(model);
  torch::Dtype stored = export_dtype(t, options);
  // fp32 weights of a model that computes in bf16 come from the optimizer's fp32 master.
  bool from_master = stored == torch::kFloat32 && t.dtype() != torch::kFloat32;
  if (from_master)
    ZF_REQUIRE(options.master.defined() && options.layout && options.master.numel() >= int64_t(options.layout->numel),
               "internal: checkpoint.export_dtype = \"float32\" without the fp32 master weights of the whole model");
  torch::Tensor master = from_master ? options.master.to(torch::kCPU) : torch::Tensor();
  const Directory out = Directory::open(directory, true, "the export directory");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::set<std::string> model_names;  // every name a checkpoint may give the model's tensors
  FusedParts fused_parts;
  for (const HfTensor &p : t.hf_tensors()) {
    torch::Tensor value = from_master ? master_of(master, *options.layout, p.name, p.tensor)
                                      : p.tensor.detach();
    if (p.transposed) value = value.t();
    const std::vector<std::string> names = hf_tensor_names(t.shape().type, p.name);
    model_names.insert(names.begin(), names.end());
    if (p.fused.defined()) {  // written as the checkpoints of its family hold it
      const std::vector<std::string> fused = hf_tensor_names(t.shape().type, p.fused.name);
      model_names.insert(fused.begin(), fused.end());
      fused_parts[fused.front()].emplace_back(p.fused, value);
      continue;
    }
    tensors.emplace_back(names.front(), value.to(stored));  // a view until write_safetensors copies it out
  }
  pass_through_frozen(t, options, model_names, tensors);
  // Every file is written (and fsynced) before the first one is renamed into place: a failure (a
  // full disk) leaves the directory as it was, not new weights beside an old config.json, and
  // removes only the export's own temporaries.
  // An export killed before it finished left its temporaries, which its record names: removed.
  const bool exported_before = out.kind_of(kExportRecord) == "file";
  const std::string removed = record_writer(out, kExportRecord);
  if (!removed.empty())
    log_info(format("%s: removed %s, left by an export that was killed before it finished", directory.c_str(),
                    removed.c_str()));
  struct Forget {  // failed (its temporaries removed first, below): a directory that was no export loses the record
    const Directory &out;
    bool keep;
    ~Forget() {
      if (!keep) forget_writer(out, kExportRecord);
    }
  } forget{out, exported_before};
  PendingFiles files;
  files.push_back(std::make_unique<PendingFile>(out, "model.safetensors"));
  write_safetensors(*files.back(), tensors, {{"format", "pt"}},  // transformers requires format=pt
                    fused_pieces(fused_parts, stored));
  std::string dtype_name = stored == torch::kBFloat16 ? "bfloat16" : stored == torch::kFloat16 ? "float16" : "float32";
  nlohmann::json config = hf_config(t.shape(), dtype_name, t.options().dropout);
  if (!options.init_from.empty()) config = keep_source_fields(config, options.init_from, t.options().dropout);
  if (config.contains("quantization_config")) {  // gpt-oss's MXFP4 experts, dequantised at load
    log_info(format("%s: the export writes every weight unquantised (%s), so its config.json drops the "
                    "quantization_config of %s/config.json (%s)", directory.c_str(), dtype_name.c_str(),
                    options.init_from.c_str(), excerpt(config["quantization_config"].dump()).c_str()));
    config.erase("quantization_config");
  }
  add_text_file(files, out, "config.json", config.dump(2) + "\n");
  add_text_file(files, out, "generation_config.json", generation_config(config, options.init_from));
  const bool own_template = options.chat_template.empty();
  if (!options.tokenizer_dir.empty()) copy_tokenizer_files(options.tokenizer_dir, out, files, own_template);
  for (const auto &[name, text] : options.tokenizer_files) add_text_file(files, out, name, text);
  if (!own_template) add_text_file(files, out, "chat_template.jinja", options.chat_template);
  // The record, now naming the export's files, goes into place with them (export_ownership_problem).
  std::string names;
  for (auto &file : files) names += file->name() + "\n";
  add_text_file(files, out, kExportRecord, names);
  std::vector<PendingFile *> together;
  for (auto &file : files) together.push_back(file.get());
  commit_together(together);
  forget.keep = true;  // the directory is an export now
}
}  // namespace

void save_hf_checkpoint(Model &model, const std::string &directory, const HfExportOptions &options) {
  // SIGTERM, SIGINT or SIGHUP stop it like a failure (the caller keeps the model): not half-written files.
  CancelWritesOnSignal cancel;
  write_hf_files(model, directory, options);  // a failure removes the export's own temporaries, nothing else
}

}  // namespace zf
