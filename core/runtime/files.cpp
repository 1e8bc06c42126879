#include "runtime/files.hpp"

#include "runtime/error.hpp"
#include "runtime/files_held.hpp"
#include "runtime/files_interrupted.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

namespace zf {
namespace {

std::string errno_text(int error = errno) { return std::strerror(error); }

// A name this process has not used yet: ".NAME.zf-<token>-<n>.tmp".
std::string temporary_name_for(const std::string &name) {
  static int counter = 0;
  return format(".%s.zf-%s-%d.tmp", excerpt(name, 80).c_str(), process_token().c_str(), ++counter);
}

// "" when `name` is one plain directory entry, else why not (entry_name_problem without the
// reserved names: zfcore's own files are named here).
std::string plain_entry_problem(const std::string &name) {
  if (name.empty()) return "is empty";
  if (name == "." || name == "..") return "names a directory itself, not an entry in it";
  if (name.find('/') != std::string::npos) return "contains '/': it must be one name, not a path";
  if (name.find('\0') != std::string::npos) return "contains a NUL character";
  if (name.size() > 200) return "is longer than 200 bytes";
  return "";
}

// What is at `name` under `fd` when it is no directory, in words ("a FIFO (named pipe)"), for messages.
std::string entry_kind_words(int fd, const std::string &name) {
  struct stat info {};
  if (fstatat(fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) return "";
  if (S_ISREG(info.st_mode)) return "a file";
  if (S_ISFIFO(info.st_mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(info.st_mode)) return "a socket";
  if (S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)) return "a device";
  return "";
}

void require_entry_name(const std::string &name, const std::string &where) {
  std::string problem = plain_entry_problem(name);
  ZF_REQUIRE(problem.empty(), "internal: %s: \"%s\" %s", where.c_str(), excerpt(name).c_str(), problem.c_str());
}

}  // namespace

void Directory::require_name(const std::string &name, const std::string &where) { require_entry_name(name, where); }

const std::string &process_token() {
  static const std::string token = [] {
    std::random_device random;
    uint64_t bits = (uint64_t(random()) << 32) ^ random() ^
                    uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    return format("%d-%08llx", int(getpid()), (unsigned long long)(bits & 0xffffffffull));
  }();
  return token;
}

std::string entry_name_problem(const std::string &name) {
  const std::string problem = plain_entry_problem(name);
  if (!problem.empty()) return problem;
  // The name is recorded in the run's JSON files (checkpoints, summary.json), which hold Unicode text.
  if (const std::string bytes = utf8_problem(name); !bytes.empty())
    return "is not UTF-8 text (" + bytes + "); zfcore records it in JSON files, which hold UTF-8 only";
  // A user's entry named like zfcore's marker or lock would be taken for them (or be overwritten).
  if (name.rfind(".zfcore", 0) == 0) return "starts with \".zfcore\", which zfcore reserves for its own files (" +
                                            std::string(kOwnerMarker) + ", .zfcore.lock): choose another name";
  return "";
}

std::string dangling_link_problem(const std::string &path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec)) || std::filesystem::exists(path, ec))
    return "";
  return "it is a symbolic link to " + excerpt(std::filesystem::read_symlink(path, ec).string()) +
         ", which does not exist: create that directory, or give another one";
}

Directory Directory::open(const std::string &path, bool create, const std::string &what) {
  const std::string who = what.empty() ? path : what;
  ZF_REQUIRE(!path.empty(), "%s: no directory given", who.c_str());
  if (const int held = open_held_directory(path, create); held >= 0) return Directory(held, path);
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    const std::string dangling = dangling_link_problem(path);
    ZF_REQUIRE(!ec, "%s: cannot create the directory %s: %s", who.c_str(), excerpt(path).c_str(),
               dangling.empty() ? ec.message().c_str() : dangling.c_str());
  }
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ZF_REQUIRE(fd >= 0, "%s: cannot open the directory %s: %s", who.c_str(), excerpt(path).c_str(),
             errno_text().c_str());
  return Directory(fd, path);
}

Directory::Directory(Directory &&other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

Directory &Directory::operator=(Directory &&other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

Directory::~Directory() {
  if (fd_ >= 0) close(fd_);
}

std::string Directory::path_of(const std::string &name) const {
  return path_.empty() || path_.back() == '/' ? path_ + name : path_ + "/" + name;
}

Directory Directory::subdirectory(const std::string &name, bool create) const {
  require_entry_name(name, path_);
  if (create && mkdirat(fd_, name.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(format("cannot create the directory %s: %s", path_of(name).c_str(), errno_text().c_str()));
  int fd = openat(fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int error = errno;
  // A link fails with ELOOP, or with ENOTDIR where O_DIRECTORY is checked first (Linux).
  if (fd < 0 && (error == ELOOP || error == ENOTDIR) && kind_of(name) == "link")
    throw Error(format("%s is a symbolic link: zfcore does not write where a link points; remove the link or "
                       "choose another directory", path_of(name).c_str()));
  const std::string other = fd < 0 && error == ENOTDIR ? entry_kind_words(fd_, name) : "";
  ZF_REQUIRE(other.empty(), "%s is %s, not a directory: move it away (zfcore creates its directory of that name "
             "there) or choose another directory", path_of(name).c_str(), other.c_str());
  ZF_REQUIRE(fd >= 0, "cannot open the directory %s: %s", path_of(name).c_str(), errno_text(error).c_str());
  return Directory(fd, path_of(name));
}

std::string Directory::writable_problem() const {
  const std::string probe = temporary_name_for("write-test");
  int fd = openat(fd_, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno_text();
  close(fd);
  unlinkat(fd_, probe.c_str(), 0);
  return "";
}

int Directory::open_append(const std::string &name) const {
  require_entry_name(name, path_);
  // O_NONBLOCK: a FIFO named like our file must not stop the run at open.
  int fd = openat(fd_, name.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP)
    throw Error(format("%s is a symbolic link: zfcore does not write through links; remove it (the file it points "
                       "to is left as it is)", path_of(name).c_str()));
  // ENXIO: a socket (or a FIFO no one reads), which O_NONBLOCK keeps from blocking.
  ZF_REQUIRE(fd >= 0 || errno != ENXIO, "%s is a socket or a FIFO, not a regular file: remove it, zfcore writes its "
             "own file there", path_of(name).c_str());
  ZF_REQUIRE(fd >= 0, "cannot write %s: %s", path_of(name).c_str(), errno_text().c_str());
  struct stat info {};
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    throw Error(format("%s is not a regular file: remove it, zfcore writes its own file there", path_of(name).c_str()));
  }
  if (info.st_nlink > 1) {  // a hard link: appending would change the file's other names too
    close(fd);
    throw Error(format("%s has other names (hard links): zfcore does not write into a file shared with another "
                       "name; remove it", path_of(name).c_str()));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

int Directory::create_new(const std::string &name) const {
  require_entry_name(name, path_);
  int fd = openat(fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  ZF_REQUIRE(fd >= 0, "cannot create %s: %s", path_of(name).c_str(),
             errno == EEXIST ? "it exists already (zfcore creates this file new)" : errno_text().c_str());
  return fd;
}

void Directory::write_atomically(const std::string &name, const std::string &text) const {
  PendingFile file(*this, name);
  file.write(text);
  file.commit();
}

std::string Directory::kind_of(const std::string &name) const {
  struct stat info {};
  if (fstatat(fd_, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) return "";
  if (S_ISLNK(info.st_mode)) return "link";
  if (S_ISDIR(info.st_mode)) return "dir";
  if (S_ISREG(info.st_mode)) return "file";
  return "other";
}

std::string Directory::rename_entry(const std::string &from, const std::string &to) const {
  require_entry_name(from, path_);
  require_entry_name(to, path_);
  if (renameat2(fd_, from.c_str(), fd_, to.c_str(), RENAME_NOREPLACE) == 0) return "";
  if (errno != EINVAL && errno != ENOSYS)
    return format("cannot rename %s to %s: %s", path_of(from).c_str(), to.c_str(), errno_text().c_str());
  // A filesystem without RENAME_NOREPLACE: check, then rename (the window is this process's own).
  if (!kind_of(to).empty()) return format("cannot rename %s to %s: it exists", path_of(from).c_str(), to.c_str());
  if (renameat(fd_, from.c_str(), fd_, to.c_str()) == 0) return "";
  return format("cannot rename %s to %s: %s", path_of(from).c_str(), to.c_str(), errno_text().c_str());
}

std::string Directory::remove_own_file(const std::string &name) const {
  require_entry_name(name, path_);
  if (name.find(".zf-" + process_token() + "-") == std::string::npos)
    return path_of(name) + " was not created by this process: left as it is";
  if (unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT) return path_of(name) + ": " + errno_text();
  return "";
}

PendingFile::PendingFile(const Directory &directory, const std::string &name)
    : dir_path_(directory.path()), name_(name), temporary_(temporary_name_for(name)) {
  require_entry_name(name, directory.path());
  dir_fd_ = dup(directory.fd());
  ZF_REQUIRE(dir_fd_ >= 0, "%s: %s", directory.path().c_str(), errno_text().c_str());
  fd_ = openat(dir_fd_, temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const std::string why = errno_text();
    close(dir_fd_);
    throw Error(format("cannot create %s: %s", temporary_path().c_str(), why.c_str()));
  }
}

PendingFile::~PendingFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) unlinkat(dir_fd_, temporary_.c_str(), 0);  // our own temporary, by the name we made
  close(dir_fd_);
}

std::string PendingFile::temporary_path() const { return dir_path_ + "/" + temporary_; }

void PendingFile::write(const void *data, size_t bytes) {
  ZF_REQUIRE(fd_ >= 0, "internal: %s written after it was finished", temporary_path().c_str());
  if (const int signal = write_cancel_signal())
    throw Error(format("stopped by signal %d (%s) before %s was written whole; its temporary is removed", signal,
                       strsignal(signal), (dir_path_ + "/" + name_).c_str()));
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t(1) << 30));
    if (n < 0 && errno == EINTR) continue;
    ZF_REQUIRE(n > 0, "%s: write failed: %s (disk full?)", temporary_path().c_str(),
               n < 0 ? errno_text().c_str() : "no progress");
    p += n;
    bytes -= size_t(n);
  }
}

void PendingFile::finish() {
  if (fd_ < 0) return;
  const bool synced = fsync(fd_) == 0;
  const std::string why = errno_text();
  const bool closed = close(fd_) == 0;
  fd_ = -1;
  ZF_REQUIRE(synced, "%s: fsync failed: %s (disk full?)", temporary_path().c_str(), why.c_str());
  ZF_REQUIRE(closed, "%s: close failed: %s (disk full?)", temporary_path().c_str(), errno_text().c_str());
}

void PendingFile::commit() {
  finish();
  if (renameat(dir_fd_, temporary_.c_str(), dir_fd_, name_.c_str()) != 0) {
    const int error = errno;
    // A directory of that name (a user's) is in the way: said so, as commit_together says it.
    ZF_REQUIRE(error != EISDIR, "cannot write %s/%s: a directory of that name is in the way (zfcore replaces only "
               "files); move it away", dir_path_.c_str(), name_.c_str());
    throw Error(format("cannot rename %s to %s: %s", temporary_path().c_str(), name_.c_str(), errno_text(error).c_str()));
  }
  committed_ = true;
  fsync(dir_fd_);  // the rename itself survives a crash
}

void write_file_atomically(const std::string &path, const std::string &text) {
  const std::filesystem::path where(path);
  const std::string parent = where.has_parent_path() ? where.parent_path().string() : ".";
  Directory::open(parent, false).write_atomically(where.filename().string(), text);
}

void commit_together(const std::vector<PendingFile *> &files) {
  for (PendingFile *file : files) file->finish();
  // A rename onto a directory (or a FIFO, a device) would fail halfway through the set: refused
  // before the first one.
  for (PendingFile *file : files) {
    struct stat info {};
    if (fstatat(file->dir_fd_, file->name_.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    ZF_REQUIRE(S_ISREG(info.st_mode) || S_ISLNK(info.st_mode),
               "cannot write %s/%s: a %s of that name is in the way (zfcore replaces only files); move it away",
               file->dir_path_.c_str(), file->name_.c_str(), S_ISDIR(info.st_mode) ? "directory" : "special file");
  }
  for (PendingFile *file : files) file->commit();
}

}  // namespace zf
