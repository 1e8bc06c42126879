// files_held.hpp: the directories of a running run, held open from its start (the run's lock,
// engine/run_lock.hpp). Directory::open (files.hpp) of a path at or below one opens it under the held
// descriptor (links below it not followed), so a directory moved away and recreated by name mid-run
// is never written into: the run's files all stay where it started, and a moved one is reported once.
#pragma once

#include <string>

namespace zf {

// `fd` stays the caller's: it is held open until release_directory(fd).
void hold_directory(const std::string &path, int fd);
void release_directory(int fd);
// Directory::open's first try: `path` opened under a held directory it lies at or below, component by
// component without following links (created when `create`); -1 when it lies below none, or a
// component is a link or missing (then it is opened by name).
int open_held_directory(const std::string &path, bool create);
// Where `path` is now, for messages: at or below a held directory that was moved mid-run, the path it
// was moved to (or `path` saying its directory was removed); else `path` as it is.
std::string held_path_now(const std::string &path);

}  // namespace zf
