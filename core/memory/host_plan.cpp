#include "memory/host_plan.hpp"

#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>

namespace zf {
namespace {

namespace fs = std::filesystem;

struct WayOut {
  std::string setting;
  uint64_t bytes;  // what the limit is compared with under the setting
};

// "Settings that fit: A (x); B (y). Not enough alone: C (z)." or why nothing does.
std::string ways_text(const std::vector<WayOut> &ways, uint64_t limit, const char *unit) {
  std::string fit, short_of;
  for (const WayOut &w : ways) {
    std::string item = format("%s: %s%s", w.setting.c_str(), format_bytes(w.bytes).c_str(), unit);
    std::string &list = w.bytes <= limit ? fit : short_of;
    list += (list.empty() ? "" : "; ") + item;
  }
  std::string text = fit.empty() ? "No setting of this run fits alone" : "Settings that fit: " + fit;
  if (!short_of.empty()) text += (fit.empty() ? " (" : ". Not enough alone: ") + short_of + (fit.empty() ? ")" : "");
  return text + ".";
}

}  // namespace

std::string host_ways_out(const HostDemand &d, uint64_t limit) {
  std::vector<WayOut> ways;
  const uint64_t host = d.rank.host(), ranks = uint64_t(std::max(1, d.ranks_per_host));
  const uint64_t state = std::min(d.state_on_host, host);
  if (d.moments_halvable && state > 0)
    ways.push_back({"optimizer.moment_dtype = \"bf16\" (half the moments' bytes)", (host - state / 2) * ranks});
  if (d.nvme_available && state > 0)
    ways.push_back({"offload.plugin = \"nvme\" with offload.path on a local NVMe drive (the optimizer state on disk, "
                    "a few tiles of it in host memory)",
                    (host - state) * ranks});
  if (host > 0 && ranks > 1) {
    const uint64_t fit = limit / host;
    if (fit >= 1 && fit < ranks)
      ways.push_back({format("%llu rank%s per host instead of %llu (mpirun --map-by ppr:%llu:node; the %llu ranks over "
                             "%llu hosts)",
                             (unsigned long long)fit, fit == 1 ? "" : "s", (unsigned long long)ranks,
                             (unsigned long long)fit, (unsigned long long)d.world,
                             (unsigned long long)((d.world + fit - 1) / fit)),
                      host * fit});
  }
  std::string text = ways_text(ways, limit, " per host");
  if (ways.empty() || std::none_of(ways.begin(), ways.end(), [&](const WayOut &w) { return w.bytes <= limit; }))
    text += " A smaller model, more hosts, or a larger run.host_memory_limit_gb where the host has the memory.";
  return text;
}

DiskSpace disk_space(const std::string &directory, double limit_gb) {
  if (limit_gb > 0) return {uint64_t(limit_gb * double(1ull << 30)), "checkpoint.disk_limit_gb"};
  std::error_code ec;
  fs::path at = fs::absolute(directory.empty() ? "." : directory, ec);
  while (!at.empty() && !fs::exists(at, ec) && at != at.parent_path()) at = at.parent_path();
  struct statvfs info {};
  if (statvfs(at.c_str(), &info) != 0) return {0, "unknown (statvfs failed on " + at.string() + ")"};
  return {uint64_t(info.f_bavail) * uint64_t(info.f_frsize), "free space of " + at.string()};
}

int64_t checkpoint_copies(int64_t steps, int64_t every, bool final, int64_t keep) {
  int64_t saves = every > 0 ? steps / every : 0;
  if (final && (every <= 0 || steps % every != 0)) ++saves;
  return std::min(saves, keep + 1);
}

uint64_t existing_checkpoint_bytes(const std::string &directory) {
  std::error_code ec;
  uint64_t total = 0;
  for (const auto &entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.find('.') != std::string::npos || !entry.is_directory(ec)) continue;
    for (const auto &file : fs::recursive_directory_iterator(entry.path(), ec))
      if (!file.is_symlink(ec) && file.is_regular_file(ec)) total += file.file_size(ec);
  }
  return total;
}

void check_checkpoint_space(const CheckpointDemand &d, const DiskSpace &space) {
  if (d.copies <= 0 || space.bytes == 0) return;  // nothing saved, or the space is unknown
  // Without a budget the checkpoints there already make room as the new ones come.
  const bool budget = space.source == "checkpoint.disk_limit_gb";
  const uint64_t have = space.bytes + (budget ? 0 : d.existing);
  if (d.needed() <= have) return;
  const uint64_t one = d.checkpoint_bytes();
  std::vector<WayOut> ways;
  if (d.keep > 1 && d.copies > 2) ways.push_back({"checkpoint.keep = 1 (2 on disk at once)", one * 2});
  if (d.moments_halvable && d.state_per_rank > 0) {
    const uint64_t smaller = (d.bytes_per_rank - d.state_per_rank / 2) * d.world;
    ways.push_back({"optimizer.moment_dtype = \"bf16\"", smaller * uint64_t(d.copies)});
    if (d.keep > 1 && d.copies > 2) ways.push_back({"both", smaller * 2});
  }
  throw Error(format(
      "the checkpoints do not fit their disk: one checkpoint is %s (%llu rank%s x %s: the fp32 master and the "
      "optimizer state of each shard), and the run has up to %lld on disk at once (checkpoint.keep = %lld, the "
      "newest written before the oldest goes): %s, but checkpoint.dir = \"%s\" has %s (%s%s). %s Or checkpoint.dir "
      "= a directory on a disk with %s free.",
      format_bytes(one).c_str(), (unsigned long long)d.world, d.world == 1 ? "" : "s",
      format_bytes(d.bytes_per_rank).c_str(), (long long)d.copies, (long long)d.keep, format_bytes(d.needed()).c_str(),
      d.directory.c_str(), format_bytes(have).c_str(), space.source.c_str(),
      !budget && d.existing ? format(", with %s of checkpoints there already", format_bytes(d.existing).c_str()).c_str()
                            : "",
      ways_text(ways, have, "").c_str(), format_bytes(d.needed()).c_str()));
}

}  // namespace zf
