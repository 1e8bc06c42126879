#include "config/json_keys.hpp"

#include <nlohmann/json.hpp>

#include <vector>

namespace zf {

std::map<std::string, TextPosition> json_key_positions(const std::string &text) {
  struct Container {
    bool object;
    std::string path;  // dotted path of this container ("" for the root); unnamed inside arrays
    bool named;
    bool expect_key = true;
    std::string key;  // the latest key read in an object
  };
  std::map<std::string, TextPosition> positions;
  std::vector<Container> open;
  int line = 1, column = 1;
  for (size_t i = 0; i < text.size(); ++i, ++column) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      column = 0;
    } else if (c == '{' || c == '[') {
      Container child{c == '{', "", open.empty(), true, ""};
      if (!open.empty() && open.back().object && open.back().named) {
        const Container &parent = open.back();
        child.path = parent.path.empty() ? parent.key : parent.path + "." + parent.key;
        child.named = true;
      }
      open.push_back(child);
    } else if (c == '}' || c == ']') {
      if (!open.empty()) open.pop_back();
    } else if (c == ',') {
      if (!open.empty() && open.back().object) open.back().expect_key = true;
    } else if (c == '"') {
      const TextPosition at{line, column};
      size_t end = i + 1;
      while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
      if (!open.empty() && open.back().object && open.back().expect_key) {
        Container &object = open.back();
        const nlohmann::json key = nlohmann::json::parse(text.substr(i, end + 1 - i), nullptr, false);
        object.key = key.is_string() ? key.get<std::string>() : text.substr(i + 1, end - i - 1);
        object.expect_key = false;
        if (object.named) positions[object.path.empty() ? object.key : object.path + "." + object.key] = at;
      }
      column += int(end - i);  // a string holds no raw newline
      i = end;
    }
  }
  return positions;
}

}  // namespace zf
