// The `tokens` and `text` sources: token streams cut into windows of seq_len + 1 ids. Window w of
// a stream starts at w * seq_len, so consecutive windows share one id and every id but the first
// is a target exactly once. Windows never cross from one shard into the next.
#include "data/sequences.hpp"

#include "data/token_shard.hpp"
#include "model/model.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"
#include "runtime/memory.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <filesystem>
#include <new>

namespace zf {
namespace {

// A run of ids: a mapped shard, or ids held in memory (a tokenized text file).
struct Stream {
  std::string name;
  std::shared_ptr<TokenShard> shard;
  std::vector<uint32_t> ids;
  int64_t size() const { return shard ? shard->size() : int64_t(ids.size()); }
  int64_t at(int64_t i) const { return shard ? (*shard)[i] : int64_t(ids[size_t(i)]); }
};

class TokenStreamSequences final : public SequenceSet {
 public:
  // check_ids: compare each id with vocab as it is read (shards may hold anything).
  TokenStreamSequences(std::vector<Stream> streams, int64_t seq_len, int64_t vocab, bool check_ids, std::string what)
      : streams_(std::move(streams)), seq_len_(seq_len), vocab_(vocab), check_ids_(check_ids && vocab > 0),
        what_(std::move(what)) {
    first_window_.push_back(0);
    for (const Stream &stream : streams_) {
      int64_t windows = stream.size() > seq_len_ ? (stream.size() - 1) / seq_len_ : 0;
      first_window_.push_back(first_window_.back() + windows);
      tokens_ += stream.size();
    }
  }

  int64_t count() const override { return first_window_.back(); }
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return vocab_; }

  int64_t fill(int64_t index, int64_t *inputs, int64_t *targets) const override {
    size_t s = size_t(std::upper_bound(first_window_.begin(), first_window_.end(), index) - first_window_.begin() - 1);
    const Stream &stream = streams_[s];
    int64_t start = (index - first_window_[s]) * seq_len_;
    if (stream.shard) stream.shard->check_unchanged();
    for (int64_t t = 0; t <= seq_len_; ++t) {
      int64_t id = stream.at(start + t);
      ZF_REQUIRE(!check_ids_ || id < vocab_,
                 "%s: id %lld at position %lld is not below the vocabulary size %lld (of data.vocab, the shards' "
                 "headers or model.vocab, whichever is smallest): rewrite the shard, or use a model and data.vocab "
                 "that hold its ids",
                 stream.name.c_str(), (long long)id, (long long)(start + t), (long long)vocab_);
      if (t < seq_len_) inputs[t] = id;
      if (t > 0) targets[t - 1] = id;
    }
    return seq_len_;
  }

  std::string describe() const override {
    return format("%s: %lld tokens in %zu stream(s), %lld sequences of %lld", what_.c_str(), (long long)tokens_,
                  streams_.size(), (long long)count(), (long long)seq_len_);
  }

 private:
  std::vector<Stream> streams_;
  std::vector<int64_t> first_window_;  // window index where each stream starts; one extra at the end
  int64_t seq_len_, vocab_;
  bool check_ids_;
  std::string what_;
  int64_t tokens_ = 0;
};

// Splits text into blocks of about `target` bytes, each ending just after a newline that has
// non-whitespace on both sides. The GPT-2, Qwen2 and Llama-3 split patterns always end a word
// there, so tokenizing the blocks one by one gives the ids of the whole text (and bounds the
// pre-tokenizer's memory); SentencePiece sees each block as its own text.
std::vector<std::pair<size_t, size_t>> text_blocks(const std::string &text, size_t target) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  std::vector<std::pair<size_t, size_t>> blocks;
  size_t begin = 0;
  while (text.size() - begin > target) {
    size_t cut = std::string::npos;
    for (size_t i = begin + target; i + 1 < text.size(); ++i) {
      if (text[i] == '\n' && i > begin && !space(text[i - 1]) && !space(text[i + 1])) {
        cut = i + 1;
        break;
      }
    }
    if (cut == std::string::npos) break;
    blocks.emplace_back(begin, cut);
    begin = cut;
  }
  blocks.emplace_back(begin, text.size());
  return blocks;
}

// The vocabulary of the model the config builds, when the config alone tells it (a transformer of
// model.vocab or a preset); 0 otherwise. Ids are checked against it as they are read, so an id the
// model cannot embed is reported with its file and position, not by the embedding.
int64_t model_vocab(const RunConfig &config) {
  if (!is_transformer_config(config)) return 0;
  if (config.integer("model", "vocab") > 0) return config.integer("model", "vocab");
  if (!config.string("model", "init_from").empty()) return 0;  // known once the model is read
  return transformer_options(config).shape.vocab;
}

// The smallest of the bounds that are known (> 0), or 0.
int64_t tightest(std::initializer_list<int64_t> bounds) {
  int64_t tight = 0;
  for (int64_t b : bounds)
    if (b > 0 && (tight == 0 || b < tight)) tight = b;
  return tight;
}

void require_windows(const RunConfig &config, const SequenceSet &set, int64_t longest, const std::string &what) {
  // One token or none: no seq_len would do (a sequence needs seq_len + 1 tokens, seq_len at least 1).
  ZF_REQUIRE(set.count() > 0 || longest >= 2,
             "%s: %s has %lld token(s) in its longest piece, too few to train on (a sequence needs data.seq_len + 1 "
             "tokens): give data with more text", config.where("data", "path").str().c_str(), what.c_str(),
             (long long)longest);
  ZF_REQUIRE(set.count() > 0,
             "%s: data.seq_len = %lld is larger than the data: %s has %lld tokens at most in one piece, and a sequence "
             "needs seq_len + 1; lower data.seq_len to at most %lld or add data",
             config.where("data", "seq_len").str().c_str(), (long long)set.seq_len(), what.c_str(), (long long)longest,
             (long long)std::max<int64_t>(longest - 1, 0));
}

}  // namespace

std::shared_ptr<const SequenceSet> load_token_shard_sequences(const RunConfig &config, const char *key) {
  std::string pattern = data_path(config, "a .bin token shard, a directory of them or a glob", false, key);
  std::string where = config.where("data", key).str() + ": data." + key;
  int64_t seq_len = config.integer("data", "seq_len");
  int64_t vocab = config.integer("data", "vocab");
  std::vector<Stream> streams;
  int64_t recorded_vocab = 0, longest = 0;
  bool all_recorded = true;
  try {
    for (const std::string &path : find_token_shards(pattern)) {
      Stream stream;
      stream.name = path;
      stream.shard = std::make_shared<TokenShard>(path);
      ZF_REQUIRE(!stream.shard->has_mask() && stream.shard->documents() == 0,
                 "%s: the shard carries %s (format version 2), which data.type = \"tokens\" would ignore, training on "
                 "every token across documents; data.type = \"documents\" reads them", path.c_str(),
                 stream.shard->has_mask() ? "a loss mask" : "document starts");
      ZF_REQUIRE(vocab == 0 || stream.shard->vocab() <= vocab,
                 "%s: written for a vocabulary of %lld ids, but data.vocab = %lld", path.c_str(),
                 (long long)stream.shard->vocab(), (long long)vocab);
      if (stream.size() <= seq_len)
        log_warn(format("%s: %lld tokens, fewer than data.seq_len + 1 = %lld; the shard is not used", path.c_str(),
                        (long long)stream.size(), (long long)seq_len + 1));
      recorded_vocab = std::max(recorded_vocab, stream.shard->vocab());
      all_recorded = all_recorded && stream.shard->vocab() > 0;
      longest = std::max(longest, stream.size());
      streams.push_back(std::move(stream));
    }
  } catch (const Error &e) {
    throw Error(format("%s: %s", where.c_str(), e.what()));
  }
  // Without data.vocab the shards' headers bound the ids (unknown if one shard records none).
  int64_t bound = tightest({vocab > 0 ? vocab : all_recorded ? recorded_vocab : 0, model_vocab(config)});
  auto set = std::make_shared<TokenStreamSequences>(std::move(streams), seq_len, bound, true, "tokens " + pattern);
  require_windows(config, *set, longest, pattern);
  return set;
}

namespace {
std::shared_ptr<const SequenceSet> tokenize_text_file(const RunConfig &config, const std::string &path,
                                                      const char *key) {
  std::string text = read_data_file(config, path, key);
  ZF_REQUIRE(!text.empty(), "%s: data.%s: %s is empty", config.where("data", key).str().c_str(), key, path.c_str());
  std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(config);
  check_tokenizer_vocab(config, *tokenizer);
  int64_t vocab = tokenizer->vocab_size();
  ZF_REQUIRE(vocab <= int64_t(UINT32_MAX), "%s: a vocabulary of %lld ids is too large", tokenizer->name().c_str(),
             (long long)vocab);
  Stream stream;
  stream.name = path;
  if (auto bos = tokenizer->bos_id()) stream.ids.push_back(uint32_t(*bos));
  for (const auto &[begin, end] : text_blocks(text, size_t(1) << 20)) {
    for (int64_t id : tokenizer->encode(text.substr(begin, end - begin))) stream.ids.push_back(uint32_t(id));
  }
  int64_t tokens = stream.size();
  // A tokenizer with more ids than the model: each id is checked as it is read.
  const int64_t model = model_vocab(config);
  const bool beyond_model = model > 0 && vocab > model;
  // The whole text is tokenized: an id the model cannot embed is named now, with its token, rather
  // than at the step that reads it.
  for (int64_t i = 0; beyond_model && i < tokens; ++i) {
    const int64_t id = stream.at(i);
    if (id < model) continue;
    throw Error(format("%s: data.%s: %s, token %lld (\"%s\", id %lld of tokenizer %s, which has %lld ids) is not "
                       "below the model's vocabulary, model.vocab = %lld (%s): use a model whose vocabulary holds the "
                       "tokenizer's ids (model.vocab = %lld), or the model's own tokenizer",
                       config.where("data", key).str().c_str(), key, path.c_str(), (long long)i,
                       excerpt(valid_utf8(tokenizer->decode({id})), 40).c_str(), (long long)id,
                       tokenizer->name().c_str(), (long long)vocab, (long long)model,
                       config.where("model", "vocab").str().c_str(), (long long)vocab));
  }
  auto set = std::make_shared<TokenStreamSequences>(std::vector<Stream>{std::move(stream)},
                                                    config.integer("data", "seq_len"), beyond_model ? model : vocab,
                                                    beyond_model,
                                                    "text " + path + " (" + tokenizer->name() + ")");
  require_windows(config, *set, tokens, path + " (tokenizer " + tokenizer->name() + ")");
  return set;
}
}  // namespace

std::shared_ptr<const SequenceSet> load_text_sequences(const RunConfig &config, const char *key) {
  std::string path = data_path(config, "a text file", true, key);
  try {
    return tokenize_text_file(config, path, key);
  } catch (const std::bad_alloc &) {
    // The text and its ids are held whole (up to 5 bytes a byte of text with a byte tokenizer).
    std::error_code ec;
    const uint64_t bytes = std::filesystem::file_size(path, ec);
    throw Error(format("%s: data.%s: %s (%s) does not fit in this host's memory with its token ids (a text file is "
                       "read and tokenized whole, up to 5 x its size): split it, or write it as token shards "
                       "(data.type = \"tokens\", docs/data.md)", config.where("data", key).str().c_str(), key,
                       path.c_str(), ec ? "?" : format_bytes(bytes).c_str()));
  }
}

}  // namespace zf
