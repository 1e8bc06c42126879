// make_data_source: [data] type to a source. Loaded token data is shared between the train and
// eval sources of one config, so a tokenized corpus is read once.
#include "data/data_source.hpp"

#include "data/sequence_source.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <map>
#include <mutex>

namespace zf {

std::unique_ptr<DataSource> make_random_data(const RunConfig &config, Split split);  // random_data.cpp

namespace {

// What determines the loaded sequences; equal keys share one SequenceSet while it is alive.
std::string data_key(const RunConfig &config) {
  std::string key;
  for (const char *name : {"type", "path", "tokenizer", "tokenizer_path"}) key += config.string("data", name) + '\n';
  for (const char *name : {"seq_len", "vocab", "samples"}) key += std::to_string(config.integer("data", name)) + '\n';
  return key + std::to_string(config.integer("run", "seed"));
}

std::shared_ptr<const SequenceSet> load_sequences(const RunConfig &config, const std::string &type) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const SequenceSet>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = data_key(config);
  if (auto set = loaded[key].lock()) return set;
  std::shared_ptr<const SequenceSet> set = type == "synthetic" ? load_synthetic_sequences(config)
                                           : type == "tokens"  ? load_token_shard_sequences(config)
                                           : type == "text"    ? load_text_sequences(config)
                                                               : load_alpaca_sequences(config);
  log_info(set->describe());
  loaded[key] = set;
  return set;
}

}  // namespace

std::unique_ptr<DataSource> make_data_source(const RunConfig &config, Split split) {
  std::string type = config.string("data", "type");
  if (type == "random") return make_random_data(config, split);
  if (type == "synthetic" || type == "tokens" || type == "text" || type == "alpaca") {
    auto source = make_sequence_source(load_sequences(config, type), split, config.real("data", "eval_fraction"),
                                       config.boolean("data", "shuffle"), uint64_t(config.integer("run", "seed")));
    int64_t micro_batch = config.integer("train", "micro_batch");
    if (split == Split::train && source->size() < micro_batch)
      log_warn(format("data: the training split has %lld sequence(s) of data.seq_len = %lld tokens, fewer than "
                      "train.micro_batch = %lld: every micro-batch wraps around the epoch and repeats sequences",
                      (long long)source->size(), (long long)config.integer("data", "seq_len"),
                      (long long)micro_batch));
    return source;
  }
  throw Error(format("%s: data.type = \"%s\" is not built into this zfcore", config.where("data", "type").str().c_str(),
                     type.c_str()));
}

}  // namespace zf
