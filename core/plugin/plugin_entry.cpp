#include "plugin/plugin_entry.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace zf {
namespace {

thread_local const PluginEntry *t_entry = nullptr;

// Async-signal-safe output: write(2) of constant and already-built strings only.
void say(const char *text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= size_t(written);
  }
}

void on_fatal_signal(int signal) {
  say("zfcore: fatal signal ");
  say(sigabbrev_np(signal) ? sigabbrev_np(signal) : "?");
  if (const PluginEntry *entry = t_entry) {
    say(" in ");
    say(kind_name(entry->instance.file().descriptor->kind));
    say(" plugin '");
    say(entry->instance.name());
    say("', entry ");
    say(entry->entry);
    say(", file ");
    say(entry->instance.file().path.c_str());
    say("\n");
  } else {
    say(" outside any plugin entry (in zfcore or a library it uses)\n");
  }
  // SA_RESETHAND restored the default action: the signal ends the process as it would have.
  ::raise(signal);
}

}  // namespace

PluginEntry::PluginEntry(const PluginInstance &instance, const char *entry)
    : instance(instance), entry(entry), outer_(t_entry) {
  t_entry = this;
}

PluginEntry::~PluginEntry() { t_entry = outer_; }

void report_fatal_signals() {
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  action.sa_flags = SA_RESETHAND | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(signal, &action, nullptr);
}

}  // namespace zf
