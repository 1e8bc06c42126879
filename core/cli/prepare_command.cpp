// zfcore prepare FILE: the preparation zfcore run does before training (data/prepared.hpp), alone.
#include "cli/commands.hpp"

#include "data/prepared.hpp"
#include "runtime/log.hpp"

#include <cstdio>

namespace zf {

int command_prepare(const std::vector<std::string> &args) {
  RunArgs run = parse_run_args(args, "prepare");
  RunConfig config = RunConfig::load(run.file, run.overrides, run.unsets);
  ZF_REQUIRE(prepared_type(config), "%s: data.type = \"%s\" with data.path = \"%s\" needs no preparation (chat, "
             "prompt_completion, and text of .json, .jsonl or .parquet files do)",
             config.where("data", "type").str().c_str(), config.string("data", "type").c_str(),
             config.string("data", "path").c_str());
  for (const char *key : {"path", "eval_path"}) {
    if (config.string("data", key).empty()) continue;
    PreparedData prepared = prepare_data(config, key);
    const nlohmann::json &r = prepared.record;
    std::printf("%s: prepared in %s: %lld documents, %lld tokens, loss on %s: %lld tokens\n",
                config.string("data", key).c_str(), prepared.directory.c_str(), r.value("documents", 0LL),
                r.value("tokens", 0LL), r.value("loss", std::string("?")).c_str(), r.value("counted", 0LL));
  }
  return 0;
}

}  // namespace zf
