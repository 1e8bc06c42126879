// files.hpp: the filesystem rule. Every file zfcore writes, renames or removes goes through here;
// no other code calls open(O_CREAT), std::ofstream, rename or remove on a user's directory.
//
//  1. Writes never follow a link. A directory is opened once (the path the user gave may hold
//     links: that is their choice) and every entry in it is created with openat(O_NOFOLLOW |
//     O_EXCL) under that descriptor, so a link named like one of our files is never written
//     through, and a directory renamed or replaced meanwhile is not written into by name.
//  2. A file appears whole or not at all: it is written to a temporary name this process
//     generated (".NAME.zf-<token>.tmp"), fsynced, and renamed onto NAME (PendingFile). Renaming
//     onto a link replaces the link itself, never its target.
//  3. zfcore removes, renames over or truncates only what it can prove it created: temporaries
//     named with this process's token (process_token()), and directories carrying an ownership
//     marker it wrote (Directory::create_owned, remove_owned). Never an entry matched by a name
//     pattern alone (".tmp", "step-*"). Removing a tree never follows the links inside it.
//
// Reading follows the input rule of runtime/input.hpp (regular files only, sizes and nesting
// bounded, paths named by a file kept inside its directory: path_inside_problem()).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace zf {

// Unique to this process (pid, time, random bits), the same for its whole life: part of every
// temporary name it generates, so its own entries are told apart from anyone else's.
const std::string &process_token();

// "" when `name` is one plain directory entry (not empty, ".", "..", no '/' or NUL, not one of
// zfcore's reserved ".zfcore*" names), else why not. Every name a user chooses that becomes an entry
// (run.name, a bench row) is checked with it.
std::string entry_name_problem(const std::string &name);

// The ownership marker a directory zfcore creates for itself holds (Directory::create_owned).
constexpr const char *kOwnerMarker = ".zfcore-owner";

// A directory zfcore writes into, opened once. Move-only; closes its descriptor when destroyed.
// "it is a symbolic link to T, which does not exist: ..." where `path` is a link to nowhere (whose
// creation fails with "File exists"), else "".
std::string dangling_link_problem(const std::string &path);

class Directory {
 public:
  // Opens `path` (a user's path: links in it are followed), with its parents created first when
  // `create`. Throws zf::Error "<what>: cannot create/open <path>: <why>" (`what` names the key,
  // e.g. "run.output_dir = \"runs/x\" at train.toml:3:1"; the path when empty).
  static Directory open(const std::string &path, bool create, const std::string &what = "");

  Directory() = default;
  Directory(Directory &&other) noexcept;
  Directory &operator=(Directory &&other) noexcept;
  Directory(const Directory &) = delete;
  Directory &operator=(const Directory &) = delete;
  ~Directory();

  int fd() const { return fd_; }
  const std::string &path() const { return path_; }
  std::string path_of(const std::string &name) const;  // "path/name", for messages

  // The subdirectory `name`, created when missing and `create`. A link named `name` is refused
  // (zfcore creates what it writes under; it does not go where a link points).
  Directory subdirectory(const std::string &name, bool create) const;

  // "" when this process can create files here (a file of a generated name is created, then
  // removed), else the system's reason ("Permission denied", "Read-only file system").
  std::string writable_problem() const;

  // Opens `name` read-write to append to (created when missing, never truncated): a link, a FIFO
  // or anything but a regular file is refused with zf::Error naming path_of(name). Returns the fd;
  // the caller closes it.
  int open_append(const std::string &name) const;

  // Creates the new file `name` (O_EXCL | O_NOFOLLOW: an existing entry, a link included, is an
  // error) for writing, e.g. a log another process writes into. Returns the fd; the caller closes it.
  int create_new(const std::string &name) const;

  // Writes `text` as `name` through a PendingFile (temporary, fsync, rename). Throws zf::Error.
  void write_atomically(const std::string &name, const std::string &text) const;

  // Entry kind without following a link: "" missing, "file", "dir", "link", "other".
  std::string kind_of(const std::string &name) const;

  // Renames entry `from` to `to` in this directory, never replacing an existing `to`
  // (RENAME_NOREPLACE). "" or why not. Use for entries this process created.
  std::string rename_entry(const std::string &from, const std::string &to) const;

  // Ownership markers: a directory zfcore creates for itself holds a file ".zfcore-owner" whose
  // text is the owner (a run id). Only such a directory is ever removed or replaced by zfcore.
  //
  // Creates the new directory `name` (it must not exist) with `owner`'s marker; throws zf::Error.
  Directory create_owned(const std::string &name, const std::string &owner) const;
  // The owner recorded in `name`, "" when `name` is no directory (a link is not followed) or has
  // no marker zfcore can read.
  std::string owner_of(const std::string &name) const;
  // Removes the directory tree `name` when its marker says `owner` (any owner when `owner` is "*"):
  // "" when removed (or missing), else why not ("has no .zfcore-owner marker: not zfcore's",
  // "belongs to run X"). Links inside are removed as links, never followed; the marker goes last,
  // so a removal cut short can be finished later.
  std::string remove_owned(const std::string &name, const std::string &owner) const;
  // The entries of the directory `name` (links not followed), but its marker: "" missing.
  std::vector<std::string> entries_of(const std::string &name) const;
  // Removes from the directory `name`, when its marker says `owner`, only the regular files `files`
  // (those zfcore wrote there, in that order: a reader must never find half of them); then, when
  // nothing else is left, its marker and itself. Else its marker goes (what remains is the user's)
  // and the directory stays: returns why ("holds entries zfcore did not write: notes.txt"); "" when
  // the directory is gone.
  std::string remove_owned_files(const std::string &name, const std::string &owner,
                                 const std::vector<std::string> &files) const;
  // Removes file `name` when this process created it: its name carries process_token(). "" or why not.
  std::string remove_own_file(const std::string &name) const;

 private:
  Directory(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // Throws (an internal error) unless `name` is one plain entry name.
  static void require_name(const std::string &name, const std::string &where);
  int fd_ = -1;
  std::string path_;
};

// A file being written to `directory`/`name`: created under a generated temporary name
// (O_CREAT | O_EXCL | O_NOFOLLOW), then fsynced and renamed onto `name` by commit(). Until then
// the old `name`, if any, is untouched; a PendingFile destroyed uncommitted removes its
// temporary (its own, by the name it generated), so a failure leaves nothing behind.
class PendingFile {
 public:
  PendingFile(const Directory &directory, const std::string &name);
  ~PendingFile();
  PendingFile(const PendingFile &) = delete;
  PendingFile &operator=(const PendingFile &) = delete;

  int fd() const { return fd_; }
  const std::string &name() const { return name_; }
  std::string temporary_path() const;  // for messages

  // Writes all bytes (retrying short writes); zf::Error "<temporary>: write failed: ... (disk full?)".
  void write(const void *data, size_t bytes);
  void write(const std::string &text) { write(text.data(), text.size()); }
  // fsync and close: after it only the rename remains. Called by commit() when not yet done.
  void finish();
  // Renames the temporary onto `name` and fsyncs the directory. Throws zf::Error.
  void commit();

 private:
  friend void commit_together(const std::vector<PendingFile *> &files);
  int dir_fd_ = -1;  // a duplicate of the directory's descriptor: outlives the Directory
  std::string dir_path_, name_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `text` as the file `path` (its directory must exist) through the rule: opens the directory,
// then Directory::write_atomically. For a single file; several that belong together: PendingFile.
void write_file_atomically(const std::string &path, const std::string &text);

// Commits files that belong together (a model's weights and its config.json): all are written and
// fsynced, and no target is a directory or special file, before the first rename; so a full disk,
// a failed write or an entry in the way leaves every old file as it was (zf::Error says which).
// Only the renames, which allocate nothing, remain after that point.
void commit_together(const std::vector<PendingFile *> &files);

}  // namespace zf
