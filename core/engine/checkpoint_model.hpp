// checkpoint_model.hpp: the model a checkpoint's weights were trained as. The layout digest sees
// only the parameters' names and shapes; a change of model.heads (at the same hidden size),
// norm_eps, rope_theta or tie_embeddings keeps every shape and silently computes another model. A
// checkpoint records the resolved [model] keys (checkpoint.json "model"); resume, zfcore eval and
// zfcore export refuse a config whose model differs, naming each key.
#pragma once

#include "config/config.hpp"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace zf {

// The [model] keys the weights mean something under, as "key" and its value's text: a transformer's
// resolved shape (after preset and model.init_from), linear_stack's hidden and layers (a change of
// those is named by key rather than as "another model layout").
std::vector<std::pair<std::string, std::string>> model_record(const RunConfig &config);

// The model recorded in `checkpoint`'s checkpoint.json (empty when an older zfcore recorded none,
// or the record is not what its save wrote).
std::vector<std::pair<std::string, std::string>> recorded_model(const std::filesystem::path &checkpoint);

// Throws zf::Error when the model recorded in `checkpoint` differs from `config`'s in any key: each
// named with the checkpoint's value and the config's (and where it is set), and what to do. `use`
// says what the checkpoint is for ("resume", "evaluate", "export").
void check_same_model(const std::filesystem::path &checkpoint, const RunConfig &config, const std::string &use);

}  // namespace zf
