// make_tokenizer: [data] tokenizer and tokenizer_path to a Tokenizer, with located errors.
#include "tokenizer/tokenizer.hpp"

#include "config/config.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <sys/stat.h>

namespace zf {

std::unique_ptr<Tokenizer> make_tokenizer(const RunConfig &config) {
  std::string kind = config.string("data", "tokenizer");
  if (kind == "byte") return make_byte_tokenizer(true);

  std::string path = config.string("data", "tokenizer_path");
  std::string where = config.where("data", "tokenizer_path").str();
  ZF_REQUIRE(!path.empty(), "%s: data.tokenizer = \"%s\" needs data.tokenizer_path (the %s file or its directory)",
             config.where("data", "tokenizer").str().c_str(), kind.c_str(),
             kind == "hf" ? "tokenizer.json" : "tokenizer.model");
  // A model directory (as downloaded from the Hub) stands for the usual file inside it.
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    const std::string name = kind == "hf" ? "tokenizer.json" : "tokenizer.model";
    const std::string outside = path_inside_problem(path, name);  // a link out of it is not the model's file
    ZF_REQUIRE(outside.empty(), "%s: data.tokenizer_path: %s/%s %s; zfcore reads a model's files only from inside "
               "its directory: copy the file there", where.c_str(), path.c_str(), name.c_str(), outside.c_str());
    path += "/" + name;
  }
  // Says which: missing, a directory, a FIFO (read, it would wait for a writer forever).
  const std::string problem = regular_file_problem(path);
  ZF_REQUIRE(problem.empty(), "%s: data.tokenizer_path: %s: %s", where.c_str(), path.c_str(), problem.c_str());
  try {
    return kind == "hf" ? load_hf_tokenizer(path) : load_sentencepiece_tokenizer(path);
  } catch (const Error &e) {
    throw Error(format("%s: data.tokenizer_path: %s", where.c_str(), e.what()));
  }
}

}  // namespace zf
