// Finding and reading the files [data] names, with errors that point at the config.
#include "data/sequences.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "tokenizer/tokenizer.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

namespace zf {
namespace {
// Text and Alpaca files are read whole into memory; larger data belongs in token shards.
constexpr uint64_t kMaxDataFileBytes = 16ull << 30;
}  // namespace

std::string data_path(const RunConfig &config, const char *needs, bool must_exist, const char *key) {
  std::string type = config.string("data", "type");
  std::string path = config.string("data", key);
  ZF_REQUIRE(!path.empty(), "%s: data.type = \"%s\" needs data.%s (%s)", config.where("data", "type").str().c_str(),
             type.c_str(), key, needs);
  struct stat info {};
  if (must_exist && stat(path.c_str(), &info) != 0) {
    const int error = errno;
    const std::string where = config.where("data", key).str();
    ZF_REQUIRE(error != ENOENT, "%s: data.%s: no such file: %s", where.c_str(), key, path.c_str());
    throw Error(format("%s: data.%s: cannot read %s: %s", where.c_str(), key, path.c_str(),
                       error == ELOOP ? "its symbolic links lead round in a loop" : std::strerror(error)));
  }
  return path;
}

std::string read_data_file(const RunConfig &config, const std::string &path, const char *key) {
  std::string text;
  std::string why = read_regular_file(path, kMaxDataFileBytes, &text);
  ZF_REQUIRE(why.empty(), "%s: data.%s: cannot read %s: %s", config.where("data", key).str().c_str(), key,
             path.c_str(), why.c_str());
  return text;
}

void check_tokenizer_vocab(const RunConfig &config, const Tokenizer &tokenizer) {
  int64_t vocab = config.integer("data", "vocab");
  ZF_REQUIRE(vocab == 0 || tokenizer.vocab_size() <= vocab,
             "%s: data.vocab = %lld, but tokenizer %s has %lld ids; raise data.vocab (or leave it 0)",
             config.where("data", "vocab").str().c_str(), (long long)vocab, tokenizer.name().c_str(),
             (long long)tokenizer.vocab_size());
}

}  // namespace zf
