// hf_steps.hpp: the normalizer, pre_tokenizer and decoder of a tokenizer.json, each a list of steps
// read from the file. A step zfcore does not read is refused when the file is loaded, with the
// file, the field and what zfcore reads instead: a tokenizer that silently skipped a step would
// give other ids than the model was trained with.
//   normalizer     NFC, Replace (a string or a pattern), Prepend, Sequence
//   pre_tokenizer  Split (a string or a pattern; isolated, removed, merged_with_previous,
//                  merged_with_next), ByteLevel (add_prefix_space, use_regex), Sequence
//   decoder        ByteLevel, Replace (a string), ByteFallback, Fuse, Strip, Sequence
#pragma once

#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/split_regex.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace zf {

class HfNormalizer {
 public:
  // `node`: the "normalizer" value (null: none); `path` names the file in messages.
  HfNormalizer(const nlohmann::json &node, const std::string &path);
  std::string apply(const std::string &text) const;
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum Kind { nfc, replace, prepend } kind = nfc;
    std::optional<SplitRegex> pattern;  // replace
    std::string content;                // replace: the replacement; prepend: the prefix
  };
  std::vector<Step> steps_;
};

class HfPreTokenizer {
 public:
  HfPreTokenizer(const nlohmann::json &node, const std::string &path);
  // The words of a piece of normalized text, spelled in the model's alphabet (byte-level
  // characters after a ByteLevel step).
  std::vector<std::string> words(const std::string &text) const;
  bool byte_level() const { return byte_level_; }

 private:
  struct Step {
    enum Kind { split, byte_level } kind = split;
    std::optional<SplitRegex> pattern;
    SplitBehavior behavior = SplitBehavior::isolated;
    bool add_prefix_space = false, use_regex = false;  // byte_level
  };
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

class HfDecoder {
 public:
  HfDecoder(const nlohmann::json &node, const std::string &path);
  // The text of the tokens' strings, in order (bytes; the caller makes them valid UTF-8).
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum Kind { byte_level, replace, byte_fallback, fuse, strip } kind = byte_level;
    std::string pattern, content;
    int start = 0, stop = 0;  // strip
  };
  std::vector<Step> steps_;
  bool none_ = false;  // no decoder: the tokens joined by spaces, as Hugging Face does
};

}  // namespace zf
