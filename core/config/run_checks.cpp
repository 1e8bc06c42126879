// The checks of a whole config before a run starts (config/limits.hpp).
//
// Every rank must run the same config: ranks that disagree on the model crash in a collective,
// on the step count hang in one, and on the optimizer drift apart silently. At the start of a
// run each rank's canonical config text is hashed and the hashes all-gathered; when they differ,
// the texts themselves are gathered so that every rank can name the differing keys.
#include "config/limits.hpp"

#include "comm/communicator.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace zf {
namespace {

uint64_t fnv1a(const std::string &text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

zf_tensor_view cpu_view(void *data, uint64_t numel, zf_dtype dtype) {
  return zf_tensor_view{data, numel, dtype, zf_device(ZF_DEVICE_CPU), 0, 0};
}

std::map<std::string, std::string> lines_by_key(const std::string &text) {
  std::map<std::string, std::string> values;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    auto equals = line.find(" = ");
    if (equals != std::string::npos) values[line.substr(0, equals)] = line.substr(equals + 3);
  }
  return values;
}

// "train.steps: 20 vs 10 on rank 0, ..." for the keys where `mine` differs from `reference`.
std::string differences(const std::string &mine, const std::string &reference) {
  auto a = lines_by_key(mine), b = lines_by_key(reference);
  std::vector<std::string> keys;
  for (const auto &[key, value] : a) keys.push_back(key);
  for (const auto &[key, value] : b)
    if (!a.count(key)) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  std::string out;
  int listed = 0;
  for (const std::string &key : keys) {
    std::string x = a.count(key) ? a[key] : "(unset)", y = b.count(key) ? b[key] : "(unset)";
    if (x == y) continue;
    if (++listed > 8) return out + ", ...";
    out += format("%s%s: %s vs %s on rank 0", out.empty() ? "" : ", ", key.c_str(), excerpt(x, 60).c_str(),
                  excerpt(y, 60).c_str());
  }
  return out;
}

}  // namespace

std::string canonical_config_text(const RunConfig &config) {
  std::vector<std::string> lines;
  for (const auto &[table, decls] : core_schema())
    for (const zf_param_decl &decl : decls)
      lines.push_back(table + "." + decl.key + " = " + value_to_string(*config.core(table).get(decl.key)));
  for (zf_kind kind : {ZF_KIND_STAGE, ZF_KIND_OFFLOAD, ZF_KIND_OPTIMIZER, ZF_KIND_SELECTOR}) {
    const PluginSection &section = config.plugin(kind);
    std::string names;
    for (const std::string &name : section.candidates) names += (names.empty() ? "" : "|") + name;
    lines.push_back(section.table + ".plugin = " + names);
    for (const ConfigEntry &entry : section.entries)
      lines.push_back(section.table + "." + entry.key + " = " + value_to_string(entry.value));
  }
  std::string path;
  for (const std::string &dir : config.plugin_path()) path += (path.empty() ? "" : ":") + dir;
  lines.push_back("run.plugin_path = " + path);
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const std::string &line : lines) text += line + "\n";
  return text;
}

void check_same_config_on_all_ranks(const RunConfig &config, Communicator &comm) {
  int world = comm.world_size();
  if (world <= 1) return;
  std::string text = canonical_config_text(config);
  int64_t digest = int64_t(fnv1a(text));
  std::vector<int64_t> digests(static_cast<size_t>(world));
  comm.all_gather(cpu_view(&digest, 1, ZF_DTYPE_I64), cpu_view(digests.data(), digests.size(), ZF_DTYPE_I64), nullptr);
  if (std::all_of(digests.begin(), digests.end(), [&](int64_t d) { return d == digests[0]; })) return;

  int64_t length = int64_t(text.size());
  std::vector<int64_t> lengths(static_cast<size_t>(world));
  comm.all_gather(cpu_view(&length, 1, ZF_DTYPE_I64), cpu_view(lengths.data(), lengths.size(), ZF_DTYPE_I64), nullptr);
  uint64_t longest = uint64_t(*std::max_element(lengths.begin(), lengths.end()));
  std::string padded = text;
  padded.resize(longest, '\0');
  std::string all(longest * uint64_t(world), '\0');
  comm.all_gather(cpu_view(padded.data(), longest, ZF_DTYPE_U8), cpu_view(all.data(), all.size(), ZF_DTYPE_U8),
                  nullptr);
  auto text_of = [&](int rank) { return all.substr(size_t(rank) * longest, size_t(lengths[size_t(rank)])); };

  std::string report;
  for (int rank = 1; rank < world; ++rank) {
    if (digests[size_t(rank)] == digests[0]) continue;
    report += format("\n  rank %d differs in %s", rank, differences(text_of(rank), text_of(0)).c_str());
  }
  throw Error(format("%s: the ranks were given different configs (the file or --set differ); every rank must run "
                     "the same one:%s",
                     config.file().c_str(), report.c_str()));
}

}  // namespace zf
