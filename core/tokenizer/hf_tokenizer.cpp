// Hugging Face tokenizer.json files holding a BPE: byte-level (GPT-2, Qwen2/3/3.5, Llama 3, Mistral's
// Tekken, OLMo 2, Phi-4) or SentencePiece-style with byte fallback (Gemma 3). What runs, in Hugging
// Face's order:
//   added tokens whose "normalized" is false are cut out of the raw text (longest match at the
//   leftmost position, honouring lstrip/rstrip (ASCII whitespace) and single_word); the rest is
//   normalized (hf_steps.hpp), added tokens whose "normalized" is true are cut out of that, and the
//   remaining pieces go through the pre-tokenizer (hf_steps.hpp) and the BPE model (bpe.hpp).
//   Decoding maps ids to their strings and runs the decoder (hf_steps.hpp).
// A step, model or option zfcore does not read is refused with the file and the field.
#include "tokenizer/tokenizer.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"
#include "tokenizer/bpe.hpp"
#include "tokenizer/hf_steps.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <array>
#include <fstream>
#include <map>
#include <sstream>

namespace zf {
namespace {

using nlohmann::json;

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool word_byte(char c) {
  return uint8_t(c) >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Added tokens matched in text: the longest at the leftmost position.
class AddedSet {
 public:
  void add(AddedToken token) { tokens_.push_back(std::move(token)); }
  void index() {
    std::sort(tokens_.begin(), tokens_.end(),
              [](const AddedToken &a, const AddedToken &b) { return a.content.size() > b.content.size(); });
    for (size_t i = 0; i < tokens_.size(); ++i) by_first_byte_[uint8_t(tokens_[i].content[0])].push_back(i);
  }
  // Calls text(begin, end) for the pieces between added tokens and token(id) for each of these.
  template <typename Text, typename Token>
  void split(const std::string &text, Text on_text, Token on_token) const {
    size_t piece_begin = 0;
    for (size_t position = 0; position < text.size();) {
      const AddedToken *match = tokens_.empty() ? nullptr : at(text, position);
      if (!match) {
        ++position;
        continue;
      }
      size_t piece_end = position;
      if (match->lstrip)
        while (piece_end > piece_begin && ascii_space(text[piece_end - 1])) --piece_end;
      if (piece_end > piece_begin) on_text(piece_begin, piece_end);
      on_token(match->id);
      position += match->content.size();
      if (match->rstrip)
        while (position < text.size() && ascii_space(text[position])) ++position;
      piece_begin = position;
    }
    if (text.size() > piece_begin) on_text(piece_begin, text.size());
  }

 private:
  const AddedToken *at(const std::string &text, size_t position) const {
    for (size_t index : by_first_byte_[uint8_t(text[position])]) {
      const AddedToken &token = tokens_[index];
      if (text.compare(position, token.content.size(), token.content) != 0) continue;
      size_t end = position + token.content.size();
      if (token.single_word &&
          ((position > 0 && word_byte(text[position - 1])) || (end < text.size() && word_byte(text[end]))))
        continue;
      return &token;
    }
    return nullptr;
  }

  std::vector<AddedToken> tokens_;  // longest first
  std::array<std::vector<size_t>, 256> by_first_byte_;
};

std::string read_text(const std::string &path) {
  std::string text;
  std::string why = read_regular_file(path, 1ull << 30, &text);
  ZF_REQUIRE(why.empty(), "%s: cannot read the file: %s (set data.tokenizer_path to a tokenizer.json)", path.c_str(),
             why.c_str());
  return text;
}

// tokenizer_config.json beside the tokenizer.json at `path`.
std::string config_path_beside(const std::string &path) {
  return path.substr(0, path.find_last_of('/') + 1) + "tokenizer_config.json";
}

// The pre_tokenizer entries as a flat list (a Sequence lists its members).
std::vector<json> flatten(const json &node, const char *list_key) {
  if (node.is_null()) return {};
  if (node.value("type", "") == "Sequence" && node.contains(list_key)) return node[list_key].get<std::vector<json>>();
  return {node};
}

class HfTokenizer final : public Tokenizer {
 public:
  // `text` is the content of the tokenizer.json at `path`, `config_text` that of the
  // tokenizer_config.json beside it, if there is one.
  HfTokenizer(const std::string &path, const std::string &text, const std::optional<std::string> &config_text)
      : path_(path) {
    json root = parse_json(text, path);
    try {
      load(root);
    } catch (const json::exception &e) {
      throw Error(format("%s: unexpected tokenizer.json content: %s", path.c_str(), e.what()));
    }
    load_special_names(config_text);
  }

  std::string name() const override { return "hf:" + path_; }

  std::vector<int64_t> encode(const std::string &text) const override {
    std::vector<int64_t> ids;
    auto push = [&](int64_t id) { ids.push_back(id); };
    raw_added_.split(text, [&](size_t begin, size_t end) {
      std::string normalized = normalizer_->apply(text.substr(begin, end - begin));
      normalized_added_.split(normalized, [&](size_t b, size_t e) {
        for (const std::string &word : pre_tokenizer_->words(normalized.substr(b, e - b))) bpe_->encode_word(word, ids);
      }, push);
    }, push);
    return ids;
  }

  std::string decode(const std::vector<int64_t> &ids) const override {
    std::vector<std::string> tokens;
    for (int64_t id : ids) {
      auto added = added_by_id_.find(id);
      if (added != added_by_id_.end()) {
        tokens.push_back(added->second);
        continue;
      }
      const std::string *token = bpe_->token(id);
      ZF_REQUIRE(token, "%s: token id %lld is not in the vocabulary (size %lld)", path_.c_str(), (long long)id,
                 (long long)vocab_size());
      tokens.push_back(*token);
    }
    return decoder_->decode(std::move(tokens));
  }

  int64_t vocab_size() const override { return vocab_size_; }
  std::optional<int64_t> eos_id() const override { return eos_; }
  std::optional<int64_t> bos_id() const override { return bos_; }
  std::optional<int64_t> pad_id() const override { return pad_; }

 private:
  void load(const json &root) {
    const json &model = root.at("model");
    std::string type = model.value("type", "BPE");
    ZF_REQUIRE(type == "BPE", "%s: model.type is \"%s\", which zfcore does not read; it reads BPE models (for a "
               "SentencePiece model set data.tokenizer = \"sentencepiece\" and data.tokenizer_path to its tokenizer.model)",
               path_.c_str(), type.c_str());
    ZF_REQUIRE(!model.contains("dropout") || model["dropout"].is_null(),
               "%s: model.dropout is %s, which zfcore does not read (it tokenizes deterministically): set it to null",
               path_.c_str(), model["dropout"].dump().c_str());
    for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
      ZF_REQUIRE(!model.contains(key) || model[key].is_null() || model[key].get<std::string>().empty(),
                 "%s: model.%s is \"%s\", which zfcore does not read; it reads BPE models without one", path_.c_str(), key,
                 model[key].get<std::string>().c_str());
    normalizer_ = std::make_unique<HfNormalizer>(root.value("normalizer", json()), path_);
    pre_tokenizer_ = std::make_unique<HfPreTokenizer>(root.value("pre_tokenizer", json()), path_);
    decoder_ = std::make_unique<HfDecoder>(root.value("decoder", json()), path_);

    std::unordered_map<std::string, int64_t> vocab;
    for (const auto &[text, id] : model.at("vocab").items()) vocab.emplace(text, integer_id(id, "model.vocab"));
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json &merge : model.value("merges", json::array())) {
      if (merge.is_array()) {
        merges.emplace_back(merge.at(0).get<std::string>(), merge.at(1).get<std::string>());
      } else {
        std::string line = merge.get<std::string>();
        size_t space = line.find(' ');
        ZF_REQUIRE(space != std::string::npos, "%s: merge \"%s\" is not two tokens separated by a space",
                   path_.c_str(), line.c_str());
        merges.emplace_back(line.substr(0, space), line.substr(space + 1));
      }
    }
    BpeOptions options;
    options.fuse_unk = model.value("fuse_unk", false);
    options.ignore_merges = model.value("ignore_merges", false);
    options.byte_fallback = model.value("byte_fallback", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto unk = vocab.find(model["unk_token"].get<std::string>());
      ZF_REQUIRE(unk != vocab.end(), "%s: the unk_token is not in the vocabulary", path_.c_str());
      options.unk = unk->second;
    }
    try {
      bpe_ = std::make_unique<Bpe>(std::move(vocab), merges, options);
    } catch (const Error &e) {
      throw Error(format("%s: %s", path_.c_str(), e.what()));
    }
    vocab_size_ = bpe_->end_id();

    for (const json &entry : root.value("added_tokens", json::array())) {
      AddedToken token;
      token.content = entry.at("content").get<std::string>();
      token.id = integer_id(entry.at("id"), "added_tokens[].id");
      token.lstrip = entry.value("lstrip", false);
      token.rstrip = entry.value("rstrip", false);
      token.single_word = entry.value("single_word", false);
      token.normalized = entry.value("normalized", !entry.value("special", false));
      if (token.content.empty()) continue;
      added_by_id_[token.id] = token.content;
      added_by_content_[token.content] = token.id;
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      // One that is normalized is looked for in the normalized text, as its normalized content.
      if (token.normalized) token.content = normalizer_->apply(token.content);
      if (token.content.empty()) continue;
      (token.normalized ? normalized_added_ : raw_added_).add(token);
    }
    raw_added_.index();
    normalized_added_.index();

    if (root.contains("post_processor")) load_post_processor(root["post_processor"]);
  }

  int64_t integer_id(const json &id, const char *field) const {
    ZF_REQUIRE(id.is_number_integer(), "%s: %s holds %s where a token id (an integer) belongs", path_.c_str(), field,
               excerpt(id.dump(), 40).c_str());
    return id.get<int64_t>();
  }

  // A TemplateProcessing whose single-sequence template starts with a special token means every
  // sequence starts with it: that token is the BOS (Llama-3's <|begin_of_text|>).
  void load_post_processor(const json &node) {
    for (const json &step : flatten(node, "processors")) {
      std::string type = step.value("type", "");
      if (type == "ByteLevel") continue;
      if (type != "TemplateProcessing") {
        log_warn(format("%s: post-processor %s is not applied", path_.c_str(), type.c_str()));
        continue;
      }
      const json &single = step.at("single");
      if (single.empty() || !single[0].contains("SpecialToken")) continue;
      std::string name = single[0]["SpecialToken"].at("id").get<std::string>();
      const json &ids = step.at("special_tokens").at(name).at("ids");
      if (ids.size() == 1) bos_ = ids[0].get<int64_t>();
    }
  }

  // EOS and PAD come from tokenizer_config.json beside tokenizer.json; without it, EOS is the
  // first of the usual names that is an added token.
  void load_special_names(const std::optional<std::string> &config_text) {
    if (config_text) {
      std::string config_path = config_path_beside(path_);
      json config = parse_json(*config_text, config_path);
      ZF_REQUIRE(config.is_object(), "%s: expected a JSON object (Hugging Face's tokenizer_config.json), got %s",
                 config_path.c_str(), config.type_name());
      eos_ = special_id(config, "eos_token", config_path);
      pad_ = special_id(config, "pad_token", config_path);
    }
    if (!eos_) {
      for (const char *candidate : {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"}) {
        if (auto id = lookup(candidate)) {
          eos_ = id;
          break;
        }
      }
    }
  }

  std::optional<int64_t> special_id(const json &config, const char *key, const std::string &config_path) const {
    if (!config.contains(key) || config[key].is_null()) return std::nullopt;
    const json &value = config[key];
    // A token's text, or an added token's object {"content": text, ...}; anything else names the key.
    const bool object_with_text = value.is_object() && value.contains("content") && value["content"].is_string();
    ZF_REQUIRE(value.is_string() || object_with_text,
               "%s: \"%s\" must be a token's text or an object with its \"content\" text, not %s: fix the file, or "
               "remove the key (the tokenizer then finds its end-of-text token itself)", config_path.c_str(), key,
               excerpt(value.dump(), 60).c_str());
    std::string content = value.is_string() ? value.get<std::string>() : value["content"].get<std::string>();
    auto id = lookup(content);
    if (!id) log_warn(format("%s: %s \"%s\" is not a token of %s; ignored", config_path.c_str(), key, content.c_str(), path_.c_str()));
    return id;
  }

  std::optional<int64_t> lookup(const std::string &content) const {
    auto added = added_by_content_.find(content);
    if (added != added_by_content_.end()) return added->second;
    return bpe_->id(content);
  }

  std::string path_;
  std::unique_ptr<Bpe> bpe_;
  std::unique_ptr<HfNormalizer> normalizer_;
  std::unique_ptr<HfPreTokenizer> pre_tokenizer_;
  std::unique_ptr<HfDecoder> decoder_;
  AddedSet raw_added_, normalized_added_;
  std::map<int64_t, std::string> added_by_id_;
  std::map<std::string, int64_t> added_by_content_;
  int64_t vocab_size_ = 0;
  std::optional<int64_t> eos_, bos_, pad_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string &path) {
  std::string text = read_text(path);
  std::optional<std::string> config_text;
  std::error_code missing;
  if (std::filesystem::exists(config_path_beside(path), missing)) config_text = read_text(config_path_beside(path));
  return std::make_unique<HfTokenizer>(path, text, config_text);
}

std::unique_ptr<Tokenizer> parse_hf_tokenizer(const std::string &text, const std::optional<std::string> &config_text,
                                              const std::string &path) {
  return std::make_unique<HfTokenizer>(path, text, config_text);
}

}  // namespace zf
