// make_data_source: [data] type to a source. Loaded token data is shared between the train and
// eval sources of one config, so a tokenized corpus is read once.
#include "data/data_source.hpp"

#include "data/documents.hpp"
#include "data/prepared.hpp"
#include "data/sequence_source.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <map>
#include <mutex>

namespace zf {

std::unique_ptr<DataSource> make_random_data(const RunConfig &config, Split split);  // random_data.cpp

namespace {

// What determines the loaded sequences; equal keys share one SequenceSet while it is alive.
std::string data_key(const RunConfig &config, const char *path_key) {
  std::string key = config.string("data", path_key) + '\n';
  for (const char *name : {"type", "tokenizer", "tokenizer_path", "chat_template", "prepared_dir"})
    key += config.string("data", name) + '\n';
  for (const char *name : {"seq_len", "vocab", "samples"}) key += std::to_string(config.integer("data", name)) + '\n';
  key += config.boolean("data", "packing") ? "packed\n" : "\n";
  return key + std::to_string(config.integer("run", "seed"));
}

// The sequences of data.path (path_key "path") or of data.eval_path ("eval_path").
std::shared_ptr<const SequenceSet> load_sequences(const RunConfig &config, const std::string &type,
                                                  const char *path_key = "path") {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<const SequenceSet>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  std::string key = data_key(config, path_key);
  if (auto set = loaded[key].lock()) return set;
  const bool documents = type == "documents" || prepared_type(config, path_key);
  std::shared_ptr<const SequenceSet> set = documents             ? load_document_sequences(config, path_key)
                                           : type == "synthetic" ? load_synthetic_sequences(config)
                                           : type == "tokens"    ? load_token_shard_sequences(config, path_key)
                                           : type == "text"      ? load_text_sequences(config, path_key)
                                                                 : load_alpaca_sequences(config, path_key);
  if (config.boolean("data", "packing")) {
    std::shared_ptr<const SequenceSet> packed = pack_document_sequences(set);
    ZF_REQUIRE(packed, "%s: data.packing = true packs documents (data.type = \"alpaca\", \"chat\", "
               "\"prompt_completion\", \"documents\", JSON text); data.type = \"%s\" here is a stream of full "
               "windows without padding: remove data.packing", config.where("data", "packing").str().c_str(),
               type.c_str());
    set = std::move(packed);
  }
  log_info(set->describe());
  loaded[key] = set;
  return set;
}

}  // namespace

Batch DataSource::batch_of_step(int64_t step, int64_t chunk, int64_t micro_batch) {
  try {
    return batch(chunk, micro_batch);
  } catch (const Error &e) {
    throw Error(format("step %lld: %s (a resumed run stops at this step again until the data is fixed)",
                       (long long)step, e.what()));
  }
}

std::unique_ptr<DataSource> make_data_source(const RunConfig &config, Split split) {
  std::string type = config.string("data", "type");
  const std::string eval_path = config.string("data", "eval_path");
  if (!eval_path.empty()) {
    ZF_REQUIRE(type != "random" && type != "synthetic",
               "%s: data.eval_path names a file, and data.type = \"%s\" reads none; use data.eval_fraction",
               config.where("data", "eval_path").str().c_str(), type.c_str());
    ZF_REQUIRE(config.real("data", "eval_fraction") == 0,
               "%s: data.eval_path and data.eval_fraction both choose the held-out data; keep one",
               config.where("data", "eval_fraction").str().c_str());
    // The whole file, in its order; read like data.path (same type, tokenizer and seq_len).
    if (split == Split::eval)
      return make_sequence_source(load_sequences(config, type, "eval_path"), Split::eval, 1.0, false,
                                  uint64_t(config.integer("run", "seed")));
  }
  ZF_REQUIRE(type != "random" || !config.boolean("data", "packing"),
             "%s: data.packing = true packs documents (data.type = \"alpaca\"), and data.type = \"random\" has "
             "none: remove data.packing", config.where("data", "packing").str().c_str());
  if (type == "random") return make_random_data(config, split);
  if (type == "synthetic" || type == "tokens" || type == "text" || type == "alpaca" || type == "chat" ||
      type == "prompt_completion" || type == "documents") {
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
