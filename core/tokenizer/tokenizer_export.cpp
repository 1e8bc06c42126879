#include "tokenizer/tokenizer_export.hpp"

#include "config/config.hpp"
#include "model/transformer_shape.hpp"
#include "tokenizer/byte_level.hpp"

#include <nlohmann/json.hpp>

namespace zf {

std::vector<std::pair<std::string, std::string>> byte_tokenizer_files(bool eos) {
  using nlohmann::ordered_json;
  ordered_json vocab = ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(uint8_t(b))] = b;
  // No regex split and no prefix space: the text goes through as its bytes, one token each.
  const ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  ordered_json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", eos ? ordered_json::array({{{"id", 256}, {"content", "<|endoftext|>"}, {"single_word", false},
                                                   {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                                                   {"special", true}}})
                           : ordered_json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                 {"ignore_merges", false}, {"vocab", vocab}, {"merges", ordered_json::array()}}}};
  // tokenizer_class: AutoTokenizer would otherwise take config.json's model type (an empty GPT-2
  // tokenizer without vocab.json and merges.txt).
  ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                         {"add_bos_token", false},
                         {"add_prefix_space", false},
                         {"clean_up_tokenization_spaces", false}};
  if (eos) config["eos_token"] = "<|endoftext|>";
  return {{"tokenizer.json", tokenizer.dump(2) + "\n"}, {"tokenizer_config.json", config.dump(2) + "\n"}};
}

std::vector<std::pair<std::string, std::string>> exported_tokenizer_files(const RunConfig &config) {
  const std::string type = config.string("data", "type");
  // A model of vocab 256 has no row for EOS (id 256): its tokenizer has none, or transformers would
  // look the id up past the embedding's end.
  if (config.string("data", "tokenizer") == "byte" && (type == "text" || type == "alpaca"))
    return byte_tokenizer_files(transformer_options(config).shape.vocab > 256);
  return {};
}

}  // namespace zf
