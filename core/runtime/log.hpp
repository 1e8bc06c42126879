// log.hpp: one logging facility for the core and (through zf_host.log) for plugins.
// Lines go to stderr as "[zfcore rank R] LEVEL message"; rank prefixes only when world_size > 1.
#pragma once

#include <zf/zf_plugin.h>

#include <string>

namespace zf {

void log_set_rank(int rank, int world_size);
void log_set_level(zf_log_level minimum);
void log_message(zf_log_level level, const std::string &message);

inline void log_debug(const std::string &m) { log_message(ZF_LOG_DEBUG, m); }
inline void log_info(const std::string &m) { log_message(ZF_LOG_INFO, m); }
inline void log_warn(const std::string &m) { log_message(ZF_LOG_WARN, m); }
inline void log_error(const std::string &m) { log_message(ZF_LOG_ERROR, m); }

}  // namespace zf
