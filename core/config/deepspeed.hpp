// deepspeed.hpp: a DeepSpeed config (ds_config.json) as zfcore TOML, for `zfcore convert` and for
// `zfcore run | validate | eval | estimate ds_config.json`. Every key DeepSpeed documents for
// training either becomes a zfcore key or is a note (a TOML comment at the top of the output, and
// printed by the commands that run the JSON) saying what happens to it and the value that applies.
// Where DeepSpeed has a default or a semantics that differs from zfcore's (its schedulers' steps and
// warm-up, ZenFlow's defaults), the output writes DeepSpeed's; what DeepSpeed refuses is refused, at
// the key's line. "auto" is the Hugging Face Trainer's default value. A key DeepSpeed does not have is an
// error at its line and column with the nearest known key suggested, as an unknown TOML key is.
// [model] and [data] are not part of a DeepSpeed config: the output says to add them.
#pragma once

#include <string>
#include <vector>

namespace zf {

class RunConfig;

struct DeepSpeedConversion {
  std::string toml;                // the whole TOML text, notes included as comments
  std::vector<std::string> notes;  // "ds.key: what happens", one per key noted
};

// `json_text` converted; `source` (the file) is named in errors and in the output's header.
DeepSpeedConversion convert_deepspeed(const std::string &json_text, const std::string &source);
// Whether a config file is read as DeepSpeed JSON: its name ends in .json, in any case (ds.JSON).
bool is_deepspeed_config_name(const std::string &path);

// convert_deepspeed(...).toml, as `zfcore convert` prints it.
std::string deepspeed_to_toml(const std::string &json_text, const std::string &source);

// Throws, saying what to add, when `config` (the JSON at `path`, or the TOML `zfcore convert` wrote:
// `converted`) names no model or no data: training linear_stack on random data would look like success.
void require_model_and_data(const RunConfig &config, const std::string &path, bool converted);

// Whether `text` is the TOML `zfcore convert` wrote (its first line says so).
bool converted_by_zfcore(const std::string &text);

}  // namespace zf
