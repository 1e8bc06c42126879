// plugin_entry.hpp: which plugin entry a thread is running, for the report of a fatal signal. A
// PluginEntry lives around each call into a plugin; when SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT
// ends the process, the handler names the plugin, the entry and its .so file of the thread that
// received it (or says that no plugin entry was running), then lets the signal end the process.
#pragma once

#include "plugin/plugin_instance.hpp"

namespace zf {

class PluginEntry {
 public:
  PluginEntry(const PluginInstance &instance, const char *entry);
  ~PluginEntry();
  PluginEntry(const PluginEntry &) = delete;
  PluginEntry &operator=(const PluginEntry &) = delete;

  const PluginInstance &instance;
  const char *const entry;

 private:
  const PluginEntry *outer_;  // the entry this one runs inside (a plugin calling the host), or NULL
};

// Installs the handler (after MPI, whose own handlers would replace it).
void report_fatal_signals();

}  // namespace zf
