// config_checks.hpp: the config targets (config_toml, deepspeed_json) read their input as
// `zfcore validate FILE` does (RunConfig::from_file_text, then check_run_limits) and check what
// it accepted: a run can read every core key of it with the key's declared type. A plugin's own
// keys are checked when the plugin loads, not here: the corpus files plugin_* hold such errors.
#pragma once

#include "config/config.hpp"
#include "config/deepspeed.hpp"
#include "config/limits.hpp"
#include "fuzz_target.hpp"

#include <optional>

namespace zf::fuzz {

inline void fuzz_config_file(const uint8_t *data, size_t size, const std::string &name) {
  const std::string text = input_text(data, size);
  std::optional<RunConfig> config;
  bool accepted = accepts(name, [&] {
    try {
      // A DeepSpeed config runs with a model and data named on the command line.
      const bool json = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
      config = RunConfig::from_file_text(text, name, json ? std::vector<std::string>{"model.type=linear_stack",
                                                                                     "data.type=random"}
                                                          : std::vector<std::string>{});
    } catch (const Error &e) {
      // The TOML that `zfcore convert` writes for a DeepSpeed config must be TOML: the user
      // wrote JSON, not that text.
      const std::string message = e.what();
      if (message.find("writes it):") != std::string::npos && message.find(": syntax error: ") != std::string::npos)
        fail("the converted TOML does not parse: " + message + "\n" + deepspeed_to_toml(text, name));
      throw;
    }
    check_run_limits(*config, 1);
  });
  if (!accepted) return;
  // Every core key reads back with its declared type (a mismatch is an "internal" error).
  must_succeed("reading every core key", [&] {
    for (const auto &[table, decls] : core_schema()) {
      for (const zf_param_decl &decl : decls) {
        if (decl.type == ZF_PARAM_BOOL) config->boolean(table, decl.key);
        else if (decl.type == ZF_PARAM_INT) config->integer(table, decl.key);
        else if (decl.type == ZF_PARAM_FLOAT) config->real(table, decl.key);
        else config->string(table, decl.key);
      }
    }
  });
}

}  // namespace zf::fuzz
