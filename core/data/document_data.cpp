// Document data: the `documents` source (token shards of format version 2 with document starts and
// an optional loss mask) and the sources prepared into such a shard (prepared.hpp: chat,
// prompt_completion, text of JSON or Parquet). Each document is laid out by
// make_document_sequences; the log says where the loss counts and on how many tokens, and how many
// documents are longer than a sequence (with where they came from).
#include "data/documents.hpp"
#include "data/prepared.hpp"
#include "data/sequences.hpp"
#include "data/token_shard.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <algorithm>

namespace zf {
namespace {

using nlohmann::json;

// Where document d of a prepared file came from: "FILE:LINE", "FILE: element N" or "FILE: row N".
std::string origin(const json &record, int64_t d) {
  if (!record.is_object() || !record.contains("lines") || d >= int64_t(record["lines"].size()))
    return format("document %lld", (long long)d);
  std::string unit = record.value("unit", "line"), data = record.value("data", "");
  long long number = record["lines"][size_t(d)].get<long long>();
  return unit == "line" ? format("%s:%lld", data.c_str(), number) : format("%s: %s %lld", data.c_str(), unit.c_str(), number);
}

void add_shard(Documents &documents, const std::string &path, int64_t vocab, int64_t *shard_vocab) {
  TokenShard shard(path);
  ZF_REQUIRE(shard.documents() > 0, "%s: the token shard records no document starts (format version %d); "
             "data.type = \"tokens\" reads a stream of ids, data.type = \"documents\" needs version 2 with documents "
             "(docs/data.md)", path.c_str(), shard.version());
  ZF_REQUIRE(vocab == 0 || shard.vocab() <= vocab, "%s: written for a vocabulary of %lld ids, but data.vocab = %lld",
             path.c_str(), (long long)shard.vocab(), (long long)vocab);
  *shard_vocab = std::max(*shard_vocab, shard.vocab());
  for (int64_t d = 0; d < shard.documents(); ++d) {
    int64_t begin = shard.document_start(d), end = d + 1 < shard.documents() ? shard.document_start(d + 1) : shard.size();
    std::vector<int64_t> ids;
    std::vector<uint8_t> counted;
    for (int64_t i = begin; i < end; ++i) {
      ids.push_back(shard[i]);
      ZF_REQUIRE(shard.vocab() == 0 || ids.back() < shard.vocab(), "%s: id %lld at %lld is not below the vocabulary "
                 "size %lld of its header", path.c_str(), (long long)ids.back(), (long long)i, (long long)shard.vocab());
      counted.push_back(shard.counted(i) ? 1 : 0);
    }
    documents.add(ids, counted);
  }
}

}  // namespace

std::shared_ptr<const SequenceSet> load_document_sequences(const RunConfig &config, const char *key) {
  const std::string type = config.string("data", "type");
  const int64_t seq_len = config.integer("data", "seq_len");
  std::vector<std::string> paths;
  json record;
  std::string source = config.string("data", key), rule = "the shard's loss mask";
  if (prepared_type(config, key)) {
    PreparedData prepared = prepare_data(config, key);
    paths = {prepared.shard};
    record = prepared.record;
    rule = record.value("loss", "the prepared loss mask");
  } else {
    std::string pattern = data_path(config, "token shards of format version 2 with document starts", false, key);
    try {
      paths = find_token_shards(pattern);
    } catch (const Error &e) {
      throw Error(format("%s: data.%s: %s", config.where("data", key).str().c_str(), key, e.what()));
    }
  }
  Documents documents;
  int64_t vocab = 0;
  for (const std::string &path : paths) add_shard(documents, path, config.integer("data", "vocab"), &vocab);

  // Where the loss counts, and on how many tokens (a target counts where the token it predicts does;
  // a document's first token is never predicted).
  int64_t counted = 0, cut = 0, cut_counted = 0;
  std::vector<std::string> long_ones;
  for (int64_t d = 0; d < documents.count(); ++d) {
    for (int64_t i = documents.start[size_t(d)] + 1; i < documents.start[size_t(d) + 1]; ++i) {
      if (!documents.counted[size_t(i)]) continue;
      ++counted;
      if (i - documents.start[size_t(d)] > seq_len) ++cut_counted;
    }
    if (documents.length(d) > seq_len + 1 && ++cut <= 5)
      long_ones.push_back(format("%s (%lld tokens)", origin(record, d).c_str(), (long long)documents.length(d)));
  }
  const int64_t tokens = int64_t(documents.ids.size());
  log_info(format("data: loss on %s: %lld of %lld tokens counted (%.1f%%)", rule.c_str(), (long long)counted,
                  (long long)tokens, tokens ? 100.0 * double(counted) / double(tokens) : 0.0));
  if (cut > 0) {
    std::string listed;
    for (const std::string &one : long_ones) listed += "\n  " + one;
    log_warn(format("data: %lld of %lld documents are longer than data.seq_len + 1 = %lld tokens and are cut to it, "
                    "losing %lld counted tokens (raise data.seq_len to keep them); %s:%s%s", (long long)cut,
                    (long long)documents.count(), (long long)seq_len + 1, (long long)cut_counted,
                    cut > 5 ? "the first 5" : "they are", listed.c_str(), cut > 5 ? "\n  ..." : ""));
  }
  ZF_REQUIRE(counted > 0, "%s: data.%s: no token of %s counts in the loss", config.where("data", key).str().c_str(),
             key, source.c_str());
  std::string what = type + " " + source + (record.is_object() ? " (prepared " + paths[0] + ")" : "");
  return make_document_sequences(std::move(documents), seq_len, vocab, 0, what);
}

}  // namespace zf
