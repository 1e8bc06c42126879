// sequences.hpp: the data behind the token sources, as a finite indexed set of training
// sequences. Loading (files, tokenizing, checking) happens here, without libtorch;
// sequence_source.cpp adds the split, the per-epoch order and the batch tensors.
#pragma once

#include "config/config.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace zf {

class SequenceSet {
 public:
  virtual ~SequenceSet() = default;
  virtual int64_t count() const = 0;
  virtual int64_t seq_len() const = 0;
  // Every id is below it.
  virtual int64_t vocab_size() const = 0;
  // Writes sequence `index` (< count()) as seq_len() inputs and seq_len() targets (the next
  // token, or kIgnoreIndex where the loss does not count); returns how many input positions hold
  // data rather than padding.
  virtual int64_t fill(int64_t index, int64_t *inputs, int64_t *targets) const = 0;
  // Sets that pack several documents in a sequence (data.packing) write each input's position in
  // its document (0 where one starts, and at the sequence's start) and return true; the others
  // return false, their positions being 0..seq_len-1.
  virtual bool fill_positions(int64_t /*index*/, int64_t * /*positions*/) const { return false; }
  // One line for the log: what was loaded.
  virtual std::string describe() const = 0;
};

// One per [data] type; each reads the [data] keys it needs and throws located errors. The files
// come from data.`key`: "path", or "eval_path" for the held-out file.
std::shared_ptr<const SequenceSet> load_synthetic_sequences(const RunConfig &config);
std::shared_ptr<const SequenceSet> load_token_shard_sequences(const RunConfig &config, const char *key = "path");
std::shared_ptr<const SequenceSet> load_text_sequences(const RunConfig &config, const char *key = "path");
std::shared_ptr<const SequenceSet> load_alpaca_sequences(const RunConfig &config, const char *key = "path");
// documents (version 2 shards), and chat, prompt_completion, text of JSON or Parquet (prepared first).
std::shared_ptr<const SequenceSet> load_document_sequences(const RunConfig &config, const char *key = "path");

// data.path (or data.`key`), checked to be set (`needs` says what it should name) and, with
// must_exist, to exist; errors point at the key (or data.type when the path is missing).
std::string data_path(const RunConfig &config, const char *needs, bool must_exist = true, const char *key = "path");
// The whole file; errors name the file and where data.`key` was set.
std::string read_data_file(const RunConfig &config, const std::string &path, const char *key = "path");

class Tokenizer;
// Throws when data.vocab is set and the tokenizer's ids can reach past it.
void check_tokenizer_vocab(const RunConfig &config, const Tokenizer &tokenizer);

// The Alpaca prompt for one example (an empty input selects the template without input).
std::string alpaca_prompt(const std::string &instruction, const std::string &input);
// A chat template (Jinja) that renders a user turn as alpaca_prompt(content, "") and an assistant
// turn as its content and EOS: what an Alpaca-trained model's export carries.
std::string alpaca_chat_template();

}  // namespace zf
