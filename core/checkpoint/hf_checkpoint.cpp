#include "checkpoint/hf_checkpoint.hpp"

#include "checkpoint/safetensors.hpp"
#include "model/transformer.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

namespace zf {
namespace {

TransformerModel &transformer(Model &model) {
  auto *t = dynamic_cast<TransformerModel *>(&model);
  ZF_REQUIRE(t, "model.type = \"%s\" has no Hugging Face format (only gpt2, llama and qwen2 do)",
             model.name().c_str());
  return *t;
}

// Writes text to path through a temporary file and a rename, so a crash leaves no half file.
void write_text_atomically(const std::string &path, const std::string &text) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    ZF_REQUIRE(out.good(), "%s: cannot write (disk full or read-only?)", temporary.c_str());
  }
  ZF_REQUIRE(std::rename(temporary.c_str(), path.c_str()) == 0, "cannot rename %s to %s", temporary.c_str(),
             path.c_str());
}

// Buffers and copies transformers keeps in some checkpoints that are not parameters.
bool is_known_buffer(const std::string &name) {
  auto ends_with = [&](const std::string &suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq");
}

}  // namespace

void save_hf_checkpoint(Model &model, const std::string &directory, std::optional<torch::Dtype> dtype) {
  TransformerModel &t = transformer(model);
  torch::Dtype stored = dtype.value_or(t.dtype());
  std::filesystem::create_directories(directory);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const HfTensor &p : t.hf_tensors()) {
    torch::Tensor value = p.transposed ? p.tensor.detach().t() : p.tensor.detach();
    tensors.emplace_back(p.name, value.to(stored));  // a view until write_safetensors copies it out
  }
  std::string weights = directory + "/model.safetensors";
  write_safetensors(weights + ".tmp", tensors, {{"format", "pt"}});  // transformers requires format=pt
  ZF_REQUIRE(std::rename((weights + ".tmp").c_str(), weights.c_str()) == 0, "cannot rename %s.tmp to %s",
             weights.c_str(), weights.c_str());
  std::string dtype_name = stored == torch::kBFloat16 ? "bfloat16" : stored == torch::kFloat16 ? "float16" : "float32";
  write_text_atomically(directory + "/config.json",
                        hf_config(t.shape(), dtype_name, t.options().dropout).dump(2) + "\n");
}

void load_hf_checkpoint(Model &model, const std::string &directory) {
  TransformerModel &t = transformer(model);
  TransformerShape stored = read_hf_config(directory);
  ZF_REQUIRE(stored == t.shape(), "%s/config.json does not describe this model (%s)", directory.c_str(),
             shape_difference(t.shape(), stored, "here", "in the checkpoint").c_str());
  SafetensorsSet weights = SafetensorsSet::open_directory(directory);
  // Checkpoints saved from the base model (GPT2Model, LlamaModel) lack the "transformer." or
  // "model." prefix of the LM-head model.
  std::string prefix = t.shape().is_gpt2() ? "transformer." : "model.";
  std::set<std::string> used;
  for (const HfTensor &p : t.hf_tensors()) {
    std::string name = p.name;
    if (!weights.has(name) && name.rfind(prefix, 0) == 0 && weights.has(name.substr(prefix.size())))
      name = name.substr(prefix.size());
    ZF_REQUIRE(weights.has(name), "%s: the checkpoint has no tensor '%s', which a %s model with this shape needs",
               directory.c_str(), p.name.c_str(), t.name().c_str());
    torch::Tensor destination = p.transposed ? p.tensor.t() : p.tensor;
    weights.read_into(name, destination);
    used.insert(name);
  }
  std::vector<std::string> unused;
  for (const std::string &name : weights.names()) {
    bool tied_copy = t.shape().tie_embeddings && name == "lm_head.weight";
    if (!used.count(name) && !tied_copy && !is_known_buffer(name)) unused.push_back(name);
  }
  if (!unused.empty())
    log_warn(format("%s: %zu tensors of the checkpoint are not used by the %s model (first: '%s')", directory.c_str(),
                    unused.size(), t.name().c_str(), unused.front().c_str()));
}

}  // namespace zf
