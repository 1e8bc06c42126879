// The directories a run holds open from its start, and the paths below them opened under their
// descriptors (files_held.hpp).
#include "runtime/files_held.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <vector>

namespace zf {
namespace {

// The directories a run holds (hold_directory): their paths as given, made absolute lexically, and
// their descriptors.
struct HeldDirectory {
  std::string path;
  int fd;
  bool said;  // its move has been reported
};
std::mutex held_mutex;
std::vector<HeldDirectory> held_directories;

std::string lexically_absolute(const std::string &path) {
  std::error_code ec;
  std::string out = std::filesystem::absolute(path, ec).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return ec ? "" : out;
}

// Where the held directory is now: "" when it is still at its path; else its path as the kernel knows
// it through the descriptor, or "" when that cannot be read.
std::string moved_to(const HeldDirectory &held) {
  struct stat now {}, then {};
  if (stat(held.path.c_str(), &now) == 0 && fstat(held.fd, &then) == 0 && now.st_dev == then.st_dev &&
      now.st_ino == then.st_ino)
    return "";
  char target[4096];
  const ssize_t n = readlink(("/proc/self/fd/" + std::to_string(held.fd)).c_str(), target, sizeof target);
  return n > 0 && size_t(n) < sizeof target ? std::string(target, size_t(n)) : "";
}

}  // namespace

std::string held_path_now(const std::string &path) {
  const std::string absolute = lexically_absolute(path);
  std::lock_guard<std::mutex> lock(held_mutex);
  for (const HeldDirectory &held : held_directories) {
    if (absolute.empty() || (absolute != held.path && absolute.rfind(held.path + "/", 0) != 0)) continue;
    const std::string now = moved_to(held), removed = " (deleted)";
    if (now.empty()) return path;
    if (now.size() > removed.size() && now.compare(now.size() - removed.size(), removed.size(), removed) == 0)
      return path + " (its directory " + held.path + " was removed during the run)";
    return now + absolute.substr(held.path.size());
  }
  return path;
}

int open_held_directory(const std::string &path, bool create) {
  const std::string absolute = lexically_absolute(path);
  std::lock_guard<std::mutex> lock(held_mutex);
  for (HeldDirectory &held : held_directories) {
    if (absolute.empty() || (absolute != held.path && absolute.rfind(held.path + "/", 0) != 0)) continue;
    std::string now = held.said ? "" : moved_to(held);
    if (now.size() > 10 && now.compare(now.size() - 10, 10, " (deleted)") == 0) now = "removed: its files are gone";
    if (!held.said && !now.empty()) {
      held.said = true;
      log_warn(format("%s was moved away or replaced while this run writes into it: the run keeps writing into the "
                      "directory it started with (now %s), never into what is at %s now",
                      held.path.c_str(), now.c_str(), held.path.c_str()));
    }
    int at = ::fcntl(held.fd, F_DUPFD_CLOEXEC, 0);
    for (const auto &part : std::filesystem::path(absolute.substr(held.path.size()))) {
      const std::string name = part.string();
      if (at < 0 || name == "/" || name.empty()) continue;
      if (create) mkdirat(at, name.c_str(), 0755);
      const int next = openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      close(at);
      at = next;
    }
    if (at >= 0) return at;
  }
  return -1;
}

void hold_directory(const std::string &path, int fd) {
  std::lock_guard<std::mutex> lock(held_mutex);
  held_directories.push_back({lexically_absolute(path), fd, false});
}

void release_directory(int fd) {
  std::lock_guard<std::mutex> lock(held_mutex);
  for (auto it = held_directories.begin(); it != held_directories.end(); ++it)
    if (it->fd == fd) {
      held_directories.erase(it);
      return;
    }
}

}  // namespace zf
