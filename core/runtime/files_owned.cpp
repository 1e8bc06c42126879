// files_owned.cpp: the ownership markers of runtime/files.hpp: directories zfcore creates for
// itself, and the removal of what it can prove it created there (never following a link).
#include "runtime/files.hpp"

#include "runtime/error.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace zf {
namespace {

constexpr int kMaxRemoveDepth = 64;

std::string errno_text(int error = errno) { return std::strerror(error); }

// The entries of the open directory `fd` but ".", ".." and the marker; false (errno set) when it
// cannot be listed.
bool list_entries(int fd, std::vector<std::string> *names) {
  int listing = dup(fd);
  DIR *dir = listing >= 0 ? fdopendir(listing) : nullptr;
  if (!dir) {
    if (listing >= 0) close(listing);
    return false;
  }
  while (dirent *entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != ".." && name != kOwnerMarker) names->push_back(name);
  }
  closedir(dir);
  return true;
}

// Removes everything inside the open directory `fd` (links as links), then nothing else.
std::string empty_tree(int fd, const std::string &path, int depth) {
  if (depth > kMaxRemoveDepth) return path + ": nested too deep to remove";
  std::vector<std::string> names;
  if (!list_entries(fd, &names)) return path + ": " + errno_text();
  for (const std::string &name : names) {
    struct stat info {};
    if (fstatat(fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(info.st_mode)) {
      int child = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) return path + "/" + name + ": " + errno_text();
      std::string why = empty_tree(child, path + "/" + name, depth + 1);
      // A nested directory's own marker (a tree zfcore created whole) goes with it.
      unlinkat(child, kOwnerMarker, 0);
      close(child);
      if (!why.empty()) return why;
      if (unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0) return path + "/" + name + ": " + errno_text();
    } else if (unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return path + "/" + name + ": " + errno_text();
    }
  }
  return "";
}

}  // namespace

Directory Directory::create_owned(const std::string &name, const std::string &owner) const {
  require_name(name, path_);
  ZF_REQUIRE(mkdirat(fd_, name.c_str(), 0755) == 0, "cannot create the directory %s: %s", path_of(name).c_str(),
             errno == EEXIST ? "it exists already" : errno_text().c_str());
  Directory created = subdirectory(name, false);
  created.write_atomically(kOwnerMarker, owner + "\n");
  return created;
}

std::string Directory::owner_of(const std::string &name) const {
  int fd = openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  int marker = openat(fd, kOwnerMarker, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  close(fd);
  if (marker < 0) return "";
  struct stat info {};
  char text[512] = {};
  ssize_t n = fstat(marker, &info) == 0 && S_ISREG(info.st_mode) ? pread(marker, text, sizeof text - 1, 0) : -1;
  close(marker);
  if (n <= 0) return "";
  std::string owner(text, size_t(n));
  while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
  return owner;
}

std::string Directory::remove_owned(const std::string &name, const std::string &owner) const {
  require_name(name, path_);
  const std::string kind = kind_of(name);
  if (kind.empty()) return "";
  if (kind != "dir") return path_of(name) + " is not a directory zfcore created (a " + kind + ")";
  const std::string found = owner_of(name);
  if (found.empty()) return path_of(name) + " has no " + kOwnerMarker + " marker: zfcore did not create it";
  if (owner != "*" && found != owner) return path_of(name) + " belongs to " + found + ", not " + owner;
  int fd = openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return path_of(name) + ": " + errno_text();
  std::string why = empty_tree(fd, path_of(name), 0);
  if (why.empty() && unlinkat(fd, kOwnerMarker, 0) != 0 && errno != ENOENT) why = path_of(name) + ": " + errno_text();
  close(fd);
  if (why.empty() && unlinkat(fd_, name.c_str(), AT_REMOVEDIR) != 0) why = path_of(name) + ": " + errno_text();
  return why;
}

std::vector<std::string> Directory::entries_of(const std::string &name) const {
  require_name(name, path_);
  std::vector<std::string> names;
  int fd = openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return names;
  list_entries(fd, &names);
  close(fd);
  return names;
}

std::string Directory::remove_owned_files(const std::string &name, const std::string &owner,
                                          const std::vector<std::string> &files) const {
  require_name(name, path_);
  const std::string found = owner_of(name);
  if (found.empty()) return path_of(name) + " has no " + kOwnerMarker + " marker: zfcore did not create it";
  if (found != owner) return path_of(name) + " belongs to " + found + ", not " + owner;
  int fd = openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return path_of(name) + ": " + errno_text();
  std::string why;
  for (const std::string &file : files) {
    require_name(file, path_of(name));
    struct stat info {};
    if (fstatat(fd, file.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(info.st_mode)) continue;
    if (unlinkat(fd, file.c_str(), 0) != 0 && errno != ENOENT && why.empty()) why = path_of(name) + "/" + file + ": " + errno_text();
  }
  std::vector<std::string> left;
  if (why.empty() && !list_entries(fd, &left)) why = path_of(name) + ": " + errno_text();
  if (!why.empty()) {  // zfcore's files stay marked as its own, to be removed later
    close(fd);
    return why;
  }
  unlinkat(fd, kOwnerMarker, 0);  // what remains, if anything, is the user's
  close(fd);
  if (left.empty())
    return unlinkat(fd_, name.c_str(), AT_REMOVEDIR) == 0 ? "" : path_of(name) + ": " + errno_text();
  std::string names;
  for (size_t i = 0; i < left.size() && i < 5; ++i) names += (i ? ", " : "") + left[i];
  if (left.size() > 5) names += format(" and %zu more", left.size() - 5);
  return path_of(name) + " holds entries zfcore did not write (" + names + ")";
}

}  // namespace zf
