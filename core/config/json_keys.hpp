// json_keys.hpp: where each key of a JSON document is written, for messages about a file that
// nlohmann::json parsed without keeping positions (a DeepSpeed config: "ds.json:7:5: ...").
#pragma once

#include <map>
#include <string>

namespace zf {

struct TextPosition {
  int line = 0, column = 0;  // 1-based
};

// Every object key of `text` (already valid JSON) by its dotted path from the root
// ("zero_optimization.offload_optimizer.device"), at the position of its opening quote. Keys of
// objects inside arrays are left out; a key written twice keeps its last position, as the parser
// keeps the last value.
std::map<std::string, TextPosition> json_key_positions(const std::string &text);

}  // namespace zf
