// model_fixture.hpp: tiny transformers and batches shared by the model tests.
#pragma once

#include "checkpoint/safetensors.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/transformer.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace zf::test {

// A 2-layer model of `type` small enough to run in milliseconds; llama/qwen2 use grouped-query
// attention (4 heads, 2 key/value heads).
inline TransformerOptions tiny_options(const std::string &type, bool tie) {
  TransformerOptions o;
  TransformerShape &s = o.shape;
  s.type = type;
  s.hidden = 32;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = type == "gpt2" ? 4 : 2;
  s.intermediate = 48;
  s.vocab = 61;
  s.max_seq = 16;
  s.rope_theta = type == "qwen2" ? 1e6 : type == "llama" ? 1e4 : 0;
  s.norm_eps = type == "qwen2" ? 1e-6 : 1e-5;
  s.tie_embeddings = tie;
  s.qkv_bias = type != "llama";
  return o;
}

inline std::unique_ptr<TransformerModel> tiny_model(const std::string &type, bool tie, uint64_t seed = 1,
                                                    const std::string &dtype = "float32") {
  torch::manual_seed(seed);
  TransformerOptions o = tiny_options(type, tie);
  o.dtype = dtype;
  return make_transformer(o);
}

// Targets are the ids shifted left by one (next-token prediction), the last position ignored:
// what Hugging Face computes internally for labels = input_ids.
inline Batch next_token_batch(const torch::Tensor &ids) {
  Batch batch;
  batch.inputs = ids;
  batch.targets = torch::full_like(ids, kIgnoreIndex);
  int64_t length = ids.size(1);
  batch.targets.narrow(1, 0, length - 1).copy_(ids.narrow(1, 1, length - 1));
  batch.samples = ids.size(0);
  batch.tokens = ids.numel();
  return batch;
}

// Runs every block in order, as the engine does; returns the logits.
inline torch::Tensor run_blocks(Model &model, const Batch &batch) {
  torch::Tensor hidden = batch.inputs;
  for (size_t b = 0; b < model.block_names().size(); ++b) hidden = model.forward_block(b, hidden, batch);
  return hidden;
}

// The model's Hugging Face export (save_hf_checkpoint, made in DIR-single) cut into two shard
// files listed by DIR/model.safetensors.index.json, as transformers writes large models.
inline void write_sharded_hf(Model &model, const std::string &dir) {
  namespace fs = std::filesystem;
  std::string single = dir + "-single";
  save_hf_checkpoint(model, single);
  SafetensorsFile file = SafetensorsFile::open(single + "/model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> parts[2];
  nlohmann::json map = nlohmann::json::object();
  std::vector<std::string> names = file.names();
  for (size_t i = 0; i < names.size(); ++i) {
    int part = i < names.size() / 2 ? 0 : 1;
    parts[part].emplace_back(names[i], file.load(names[i]));
    map[names[i]] = "model-0000" + std::to_string(part + 1) + "-of-00002.safetensors";
  }
  fs::create_directories(dir);
  for (int part = 0; part < 2; ++part)
    write_safetensors(dir + "/model-0000" + std::to_string(part + 1) + "-of-00002.safetensors", parts[part]);
  fs::copy_file(single + "/config.json", dir + "/config.json", fs::copy_options::overwrite_existing);
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
}

}  // namespace zf::test
