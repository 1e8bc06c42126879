#include "tokenizer/hf_steps.hpp"

#include "runtime/error.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/nfc.hpp"
#include "tokenizer/unicode.hpp"

namespace zf {
namespace {

using nlohmann::json;

// The steps of `node` as (field name, step) pairs: a Sequence lists its members under `list_key`.
std::vector<std::pair<std::string, json>> steps_of(const json &node, const std::string &field, const char *list_key) {
  if (node.is_null()) return {};
  if (node.value("type", "") != "Sequence") return {{field, node}};
  std::vector<std::pair<std::string, json>> out;
  const json &members = node.at(list_key);
  for (size_t i = 0; i < members.size(); ++i) {
    auto inner = steps_of(members[i], field + "." + list_key + "[" + std::to_string(i) + "]", list_key);
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

[[noreturn]] void refuse(const std::string &path, const std::string &field, const std::string &what,
                         const char *reads) {
  throw Error(format("%s: %s is %s, which zfcore does not read; it reads %s", path.c_str(), field.c_str(),
                     what.c_str(), reads));
}

// A Replace's or Split's "pattern": {"String": text} or {"Regex": pattern}.
SplitRegex pattern_of(const json &step, const std::string &path, const std::string &field) {
  const json &pattern = step.at("pattern");
  if (pattern.contains("String")) return SplitRegex::literal(pattern["String"].get<std::string>());
  if (!pattern.contains("Regex")) refuse(path, field + ".pattern", pattern.dump(), "{\"String\": ...} and {\"Regex\": ...}");
  try {
    return SplitRegex(pattern["Regex"].get<std::string>());
  } catch (const Error &e) {
    throw Error(format("%s: %s.pattern: %s", path.c_str(), field.c_str(), e.what()));
  }
}

std::string replace_all(const std::string &text, const SplitRegex &pattern, const std::string &content) {
  std::string out;
  size_t last = 0;
  for (const auto &[begin, end] : pattern.find_all(text)) {
    out.append(text, last, begin - last);
    out += content;
    last = end;
  }
  out.append(text, last, std::string::npos);
  return out;
}

// "<0xNN>" -> NN, or -1.
int byte_token(const std::string &token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    char c = token[i];
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

HfNormalizer::HfNormalizer(const json &node, const std::string &path) {
  for (const auto &[field, step] : steps_of(node, "normalizer", "normalizers")) {
    std::string type = step.value("type", "");
    Step s;
    if (type == "NFC") {
      s.kind = Step::nfc;
    } else if (type == "Replace") {
      s.kind = Step::replace;
      s.pattern = pattern_of(step, path, field);
      s.content = step.at("content").get<std::string>();
    } else if (type == "Prepend") {
      s.kind = Step::prepend;
      s.content = step.at("prepend").get<std::string>();
    } else {
      refuse(path, field + ".type", "\"" + type + "\"", "the normalizers NFC, Replace, Prepend and Sequence");
    }
    steps_.push_back(std::move(s));
  }
}

std::string HfNormalizer::apply(const std::string &text) const {
  std::string out = text;
  for (const Step &step : steps_) {
    if (step.kind == Step::nfc) out = to_nfc(out);
    else if (step.kind == Step::replace) out = replace_all(out, *step.pattern, step.content);
    else if (!out.empty()) out = step.content + out;
  }
  return out;
}

HfPreTokenizer::HfPreTokenizer(const json &node, const std::string &path) {
  for (const auto &[field, step] : steps_of(node, "pre_tokenizer", "pretokenizers")) {
    std::string type = step.value("type", "");
    Step s;
    if (type == "Split") {
      s.kind = Step::split;
      s.pattern = pattern_of(step, path, field);
      if (step.value("invert", false)) refuse(path, field + ".invert", "true", "Split with invert = false");
      std::string behavior = step.value("behavior", "");
      if (behavior == "Isolated") s.behavior = SplitBehavior::isolated;
      else if (behavior == "Removed") s.behavior = SplitBehavior::removed;
      else if (behavior == "MergedWithPrevious") s.behavior = SplitBehavior::merged_with_previous;
      else if (behavior == "MergedWithNext") s.behavior = SplitBehavior::merged_with_next;
      else refuse(path, field + ".behavior", "\"" + behavior + "\"", "Isolated, Removed, MergedWithPrevious and MergedWithNext");
    } else if (type == "ByteLevel") {
      s.kind = Step::byte_level;
      s.add_prefix_space = step.value("add_prefix_space", true);
      s.use_regex = step.value("use_regex", true);
      byte_level_ = true;
    } else {
      refuse(path, field + ".type", "\"" + type + "\"",
             "the pre-tokenizers Split, ByteLevel and Sequence (a SentencePiece model with a Metaspace pre-tokenizer "
             "can be read from its tokenizer.model: data.tokenizer = \"sentencepiece\")");
    }
    steps_.push_back(std::move(s));
  }
}

std::vector<std::string> HfPreTokenizer::words(const std::string &text) const {
  std::vector<std::string> words{text};
  for (const Step &step : steps_) {
    std::vector<std::string> next;
    for (const std::string &word : words) {
      if (step.kind == Step::split) {
        for (const auto &[begin, end] : split_pieces(word, *step.pattern, step.behavior))
          next.push_back(word.substr(begin, end - begin));
        continue;
      }
      std::string piece = step.add_prefix_space && word.compare(0, 1, " ") != 0 ? " " + word : word;
      if (!step.use_regex) {
        next.push_back(to_byte_level(piece, 0, piece.size()));
        continue;
      }
      for (const auto &[begin, end] : pretokenize(piece, SplitPattern::gpt2))
        next.push_back(to_byte_level(piece, begin, end));
    }
    words = std::move(next);
  }
  return words;
}

HfDecoder::HfDecoder(const json &node, const std::string &path) : none_(node.is_null()) {
  for (const auto &[field, step] : steps_of(node, "decoder", "decoders")) {
    std::string type = step.value("type", "");
    Step s;
    if (type == "ByteLevel") {
      s.kind = Step::byte_level;
    } else if (type == "Replace") {
      s.kind = Step::replace;
      const json &pattern = step.at("pattern");
      if (!pattern.contains("String")) refuse(path, field + ".pattern", pattern.dump(), "a Replace decoder of a String");
      s.pattern = pattern["String"].get<std::string>();
      s.content = step.at("content").get<std::string>();
    } else if (type == "ByteFallback") {
      s.kind = Step::byte_fallback;
    } else if (type == "Fuse") {
      s.kind = Step::fuse;
    } else if (type == "Strip") {
      s.kind = Step::strip;
      s.content = step.at("content").get<std::string>();
      s.start = step.value("start", 0);
      s.stop = step.value("stop", 0);
    } else {
      refuse(path, field + ".type", "\"" + type + "\"", "the decoders ByteLevel, Replace, ByteFallback, Fuse, Strip and Sequence");
    }
    steps_.push_back(std::move(s));
  }
}

std::string HfDecoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string text;
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const Step &step : steps_) {
    std::vector<std::string> next;
    switch (step.kind) {
      case Step::byte_level:
        // A token whose characters are all in the byte-level table gives their bytes; any other
        // token (an added token with a newline, say) gives its own bytes.
        for (const std::string &token : tokens) {
          std::string bytes;
          bool all = true;
          for (size_t position = 0; position < token.size() && all;) {
            CodePoint c = decode_utf8(token, position);
            int byte = c.valid ? byte_level_byte(c.value) : -1;
            all = byte >= 0;
            bytes += char(byte);
            position += c.length;
          }
          next.push_back(all ? bytes : token);
        }
        break;
      case Step::replace:
        for (const std::string &token : tokens) next.push_back(replace_all(token, SplitRegex::literal(step.pattern), step.content));
        break;
      case Step::byte_fallback: {
        // Runs of <0xNN> tokens become their bytes when those are UTF-8, else one U+FFFD each.
        std::string run;
        size_t run_tokens = 0;
        auto flush = [&] {
          if (!run_tokens) return;
          if (valid_utf8(run) == run) next.push_back(run);
          else for (size_t i = 0; i < run_tokens; ++i) next.push_back("\xEF\xBF\xBD");
          run.clear();
          run_tokens = 0;
        };
        for (const std::string &token : tokens) {
          int byte = byte_token(token);
          if (byte >= 0) {
            run += char(byte);
            ++run_tokens;
            continue;
          }
          flush();
          next.push_back(token);
        }
        flush();
        break;
      }
      case Step::fuse: {
        std::string all;
        for (const std::string &token : tokens) all += token;
        next.push_back(all);
        break;
      }
      case Step::strip:
        for (std::string token : tokens) {
          for (int i = 0; i < step.start && token.compare(0, step.content.size(), step.content) == 0; ++i)
            token.erase(0, step.content.size());
          for (int i = 0; i < step.stop && token.size() >= step.content.size() &&
                          token.compare(token.size() - step.content.size(), step.content.size(), step.content) == 0;
               ++i)
            token.erase(token.size() - step.content.size());
          next.push_back(token);
        }
        break;
    }
    tokens = std::move(next);
  }
  std::string text;
  for (const std::string &token : tokens) text += token;
  return text;
}

}  // namespace zf
