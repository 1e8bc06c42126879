// bpe.hpp: the byte-pair-encoding model of a tokenizer.json: a vocabulary of strings and an
// ordered list of merges. A word is split into characters, then the adjacent pair with the
// lowest merge rank (leftmost among equals) is merged until no pair has a merge.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zf {

struct BpeOptions {
  std::optional<int64_t> unk;  // id for characters missing from the vocabulary; without it they are dropped
  bool fuse_unk = false;       // consecutive unknown characters give one unk
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token (Llama-3)
  // A character missing from the vocabulary becomes the tokens <0xNN> of its UTF-8 bytes when the
  // vocabulary has them all (SentencePiece-style BPE: Gemma, Llama 2).
  bool byte_fallback = false;
};

class Bpe {
 public:
  // Throws zf::Error naming the merge when a merge uses or makes a string outside the vocabulary.
  Bpe(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>> &merges,
      BpeOptions options);

  // Appends the ids of one pre-token, spelled in the vocabulary's alphabet (byte-level characters
  // for a byte-level BPE, byte_level.hpp).
  void encode_word(const std::string &word, std::vector<int64_t> &ids) const;
  // The string of id, or nullptr when the vocabulary has no such id.
  const std::string *token(int64_t id) const;
  std::optional<int64_t> id(const std::string &token) const;
  int64_t end_id() const { return int64_t(tokens_.size()); }  // one past the largest id

 private:
  std::vector<int64_t> merge(const std::string &word) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> tokens_;  // by id ("" where the vocabulary has a gap)
  std::vector<bool> has_token_;
  struct Merge {
    int32_t rank;
    int64_t result;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank and result
  BpeOptions options_;
  std::vector<int64_t> byte_ids_;  // id of <0xNN> by byte, -1 where missing (byte_fallback)
  // Words repeat a lot in text; the cache makes tokenizing a corpus several times faster.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace zf
