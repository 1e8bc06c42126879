#include "runtime/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace zf {
namespace {
std::atomic<int> g_rank{0}, g_world{1};
std::atomic<int> g_minimum{ZF_LOG_INFO};
std::mutex g_mutex;
const char *level_name(zf_log_level level) {
  switch (level) {
    case ZF_LOG_DEBUG: return "debug";
    case ZF_LOG_INFO: return "info";
    case ZF_LOG_WARN: return "warning";
    default: return "error";
  }
}
}  // namespace

void log_set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}

void log_set_level(zf_log_level minimum) { g_minimum = minimum; }

void log_message(zf_log_level level, const std::string &message) {
  if (level < g_minimum) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world > 1)
    std::fprintf(stderr, "[zfcore rank %d] %s: %s\n", g_rank.load(), level_name(level), message.c_str());
  else
    std::fprintf(stderr, "[zfcore] %s: %s\n", level_name(level), message.c_str());
  std::fflush(stderr);
}

}  // namespace zf
