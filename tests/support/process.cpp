#include "support/process.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zf::test {

Outcome run_command(const std::string &command) {
  Outcome outcome;
  std::FILE *pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return outcome;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) outcome.output.append(buffer, n);
  int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

std::string read_text(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string steps_shorter_than_timers(const std::string &steps_jsonl) {
  std::istringstream lines(steps_jsonl);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const size_t at = line.find("\"timers_ms\":");
    if (at == std::string::npos) return "step " + json_field(line, "step") + ": no timers_ms";
    const std::string timers = line.substr(at);
    const double step_ms = std::stod(json_field(line, "step_ms"));
    const double parts = std::stod(json_field(timers, "fwd")) + std::stod(json_field(timers, "bwd")) +
                         std::stod(json_field(timers, "step"));
    if (step_ms < parts * 0.999 - 0.01)  // event and clock resolution
      return "step " + json_field(line, "step") + ": step_ms " + std::to_string(step_ms) + " < fwd + bwd + step " +
             std::to_string(parts);
  }
  return "";
}

std::string json_field(const std::string &json, const std::string &key) {
  std::string needle = "\"" + key + "\":";
  auto at = json.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  if (json[at] == '"') {
    auto end = json.find('"', at + 1);
    return json.substr(at + 1, end - at - 1);
  }
  auto end = json.find_first_of(",}", at);
  return json.substr(at, end - at);
}

uint64_t ledger_bytes(const std::string &summary, const std::string &section, const std::string &tag) {
  const std::string start = "\"" + section + "\":{";
  auto at = summary.find(start);
  if (at == std::string::npos) return 0;
  std::string value = json_field(summary.substr(at, summary.find('}', at) - at + 1), tag);
  return value.empty() ? 0 : std::stoull(value);
}

std::string scratch_dir(const std::string &name) {
  std::filesystem::path dir = std::filesystem::path(ZF_TEST_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string write_file(const std::string &dir, const std::string &name, const std::string &text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

std::string line_with(const std::string &output, const std::string &part) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.find(part) != std::string::npos) return line;
  return "";
}

}  // namespace zf::test
