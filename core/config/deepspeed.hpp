// deepspeed.hpp: a DeepSpeed config (ds_config.json) as zfcore TOML, for `zfcore convert` and for
// `zfcore run ds_config.json`. Every key DeepSpeed documents for training either becomes a zfcore
// key or is listed at the top of the output (a TOML comment) with what happens to it; a key
// DeepSpeed does not have is an error naming it, as an unknown TOML key is. [model] and [data] are
// not part of a DeepSpeed config: the output says to add them.
#pragma once

#include <string>

namespace zf {

// The TOML text of `json_text`; `source` (the file) is named in errors and in the output's header.
std::string deepspeed_to_toml(const std::string &json_text, const std::string &source);

}  // namespace zf
