#include "tokenizer/bpe.hpp"

#include "runtime/error.hpp"
#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

namespace zf {
namespace {

uint64_t pair_key(int64_t left, int64_t right) { return (uint64_t(left) << 32) | uint64_t(uint32_t(right)); }

constexpr size_t kCacheLimit = 1 << 18;
constexpr size_t kCachedWordBytes = 256;

}  // namespace

Bpe::Bpe(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>> &merges,
         BpeOptions options)
    : vocab_(std::move(vocab)), options_(options) {
  int64_t end = 0;
  for (const auto &[text, id] : vocab_) {
    ZF_REQUIRE(id >= 0 && id < (int64_t(1) << 31), "token \"%s\" has id %lld, outside [0, 2^31)", text.c_str(),
               (long long)id);
    end = std::max(end, id + 1);
  }
  tokens_.assign(size_t(end), "");
  has_token_.assign(size_t(end), false);
  for (const auto &[text, id] : vocab_) {
    tokens_[size_t(id)] = text;
    has_token_[size_t(id)] = true;
  }
  if (options_.byte_fallback) {
    byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto found = id(name)) byte_ids_[size_t(b)] = *found;
    }
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto &[left, right] = merges[rank];
    auto l = vocab_.find(left), r = vocab_.find(right), result = vocab_.find(left + right);
    ZF_REQUIRE(l != vocab_.end() && r != vocab_.end() && result != vocab_.end(),
               "merge %zu (\"%s\" \"%s\") uses or makes a token that is not in the vocabulary", rank, left.c_str(),
               right.c_str());
    // The first (lowest-rank) occurrence of a pair wins, as a rank lookup would.
    merges_.emplace(pair_key(l->second, r->second), Merge{int32_t(rank), result->second});
  }
}

const std::string *Bpe::token(int64_t id) const {
  return id >= 0 && id < end_id() && has_token_[size_t(id)] ? &tokens_[size_t(id)] : nullptr;
}

std::optional<int64_t> Bpe::id(const std::string &token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? std::nullopt : std::optional<int64_t>(it->second);
}

void Bpe::encode_word(const std::string &word, std::vector<int64_t> &ids) const {
  if (options_.ignore_merges) {
    if (auto whole = id(word)) {
      ids.push_back(*whole);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int64_t> merged = merge(word);
  ids.insert(ids.end(), merged.begin(), merged.end());
  if (word.size() > kCachedWordBytes) return;  // a SentencePiece-style piece can be a whole document
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(word, std::move(merged));
}

std::vector<int64_t> Bpe::merge(const std::string &word) const {
  // Symbols form a linked list; a merge keeps the left symbol (so its index stays its position)
  // and unlinks the right one.
  std::vector<int64_t> symbol;
  bool previous_unknown = false;
  for (size_t position = 0; position < word.size();) {
    size_t length = decode_utf8(word, position).length;
    auto it = vocab_.find(word.substr(position, length));
    position += length;
    if (it != vocab_.end()) {
      symbol.push_back(it->second);
      previous_unknown = false;
    } else if (options_.byte_fallback &&
               std::all_of(word.begin() + long(position - length), word.begin() + long(position),
                           [&](char b) { return byte_ids_[uint8_t(b)] >= 0; })) {
      for (size_t b = position - length; b < position; ++b) symbol.push_back(byte_ids_[uint8_t(word[b])]);
    } else if (options_.unk) {
      if (!(options_.fuse_unk && previous_unknown)) symbol.push_back(*options_.unk);
      previous_unknown = true;
    }
  }
  int n = int(symbol.size());
  std::vector<int> next(n), previous(n);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    previous[i] = i - 1;
  }
  struct Candidate {
    int32_t rank;
    int left, right;
    int64_t left_id, right_id;
    bool operator>(const Candidate &other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    int right = next[left];
    auto it = merges_.find(pair_key(symbol[left], symbol[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, right, symbol[left], symbol[right]});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    // Stale when either side has since been merged into something else.
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || symbol[c.left] != c.left_id ||
        symbol[c.right] != c.right_id)
      continue;
    symbol[c.left] = merges_.at(pair_key(c.left_id, c.right_id)).result;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) previous[next[c.left]] = c.left;
    consider(previous[c.left]);
    consider(c.left);
  }
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i)
    if (alive[i]) out.push_back(symbol[i]);
  return out;
}

}  // namespace zf
