// prepared.hpp: chat, prompt-completion and text documents (JSON Lines, JSON, Parquet), prepared
// once into a token shard of format version 2 (ids, loss mask, document starts) by prepare_data.py,
// which renders the tokenizer's chat template with transformers itself. The prepared copy lives in
// data.prepared_dir (default $XDG_CACHE_HOME/zfcore/prepared, else ~/.cache/zfcore/prepared) and
// is reused while the data file, the tokenizer, the chat template and the preparing script are the
// ones it was made from; when one of them changed it is prepared again, and the log says which.
#pragma once

#include "config/config.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace zf {

// Whether data.type asks for preparation: chat and prompt_completion, and text of a .json,
// .jsonl or .parquet file.
bool prepared_type(const RunConfig &config, const char *key = "path");

struct PreparedData {
  std::string directory;  // holds data.bin and record.json
  std::string shard;      // directory + "/data.bin"
  nlohmann::json record;  // what prepare_data.py recorded: loss rule, counts, source lines
};

// The prepared copy of data.`key`: found, or made now (processes preparing the same data wait for
// one another; one that finds a failed attempt of the process before reports its error).
PreparedData prepare_data(const RunConfig &config, const char *key = "path");

}  // namespace zf
