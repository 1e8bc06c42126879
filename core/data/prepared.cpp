// The prepared copies of prepared.hpp: where they live, whether one matches, and running
// prepare_data.py (installed beside the built-in plugins, lib/zfcore/) to make one.
#include "data/prepared.hpp"

#include "data/sequences.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/digest.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/files_interrupted.hpp"
#include "runtime/log.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

namespace zf {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool ends_with(const std::string &text, const std::string &end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

std::string hex(uint64_t value) { return format("%016llx", (unsigned long long)value); }

// FNV-1a of the files that exist among `paths` (with their names, so a moved byte counts).
std::string files_digest(const std::vector<fs::path> &paths) {
  uint64_t state = kDigestSeed;
  std::vector<char> buffer(size_t(1) << 20);
  for (const fs::path &path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;
    state = digest_bytes(path.filename().c_str(), path.filename().string().size(), state);
    while (in.read(buffer.data(), std::streamsize(buffer.size())) || in.gcount() > 0)
      state = digest_bytes(buffer.data(), size_t(in.gcount()), state);
  }
  return hex(state);
}

fs::path cache_root(const RunConfig &config) {
  std::string dir = config.string("data", "prepared_dir");
  if (!dir.empty()) return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "zfcore" / "prepared";
  const char *home = std::getenv("HOME");
  ZF_REQUIRE(home && *home, "%s: neither data.prepared_dir, XDG_CACHE_HOME nor HOME is set: set data.prepared_dir to "
             "a directory for the prepared data", config.where("data", "type").str().c_str());
  return fs::path(home) / ".cache" / "zfcore" / "prepared";
}

struct Inputs {
  std::string type, data, tokenizer, chat_template;
  json fingerprint;  // digests of what the prepared copy is made from
};

Inputs inputs_of(const RunConfig &config, const char *key) {
  Inputs in;
  in.type = config.string("data", "type");
  in.data = fs::absolute(data_path(config, "a JSON Lines, JSON or Parquet file", true, key)).string();
  ZF_REQUIRE(config.string("data", "tokenizer") == "hf" || config.string("data", "tokenizer") == "sentencepiece",
             "%s: data.type = \"%s\" is tokenized by transformers with the model's tokenizer: set data.tokenizer = "
             "\"hf\" and data.tokenizer_path to the model's tokenizer.json or its directory",
             config.where("data", "tokenizer").str().c_str(), in.type.c_str());
  in.tokenizer = fs::absolute(data_path(config, "the model's tokenizer.json or its directory", true,
                                        "tokenizer_path")).string();
  fs::path dir = fs::is_directory(in.tokenizer) ? fs::path(in.tokenizer) : fs::path(in.tokenizer).parent_path();
  std::string chat_template = config.string("data", "chat_template");
  if (!chat_template.empty())
    in.chat_template = fs::absolute(data_path(config, "a Jinja chat template", true, "chat_template")).string();
  fs::path script = PluginRegistry::builtin_dir().parent_path() / "prepare_data.py";
  in.fingerprint = {
      {"type", in.type},
      {"text_field", "text"},
      {"data", files_digest({in.data})},
      // The files of the tokenizer transformers loads from the directory (a slow one's vocab.json and
      // merges.txt where no tokenizer.json is), as the export copies them (model/hf_checkpoint.cpp).
      {"tokenizer", files_digest({dir / "tokenizer.json", dir / "tokenizer.model", dir / "special_tokens_map.json",
                                  dir / "added_tokens.json", dir / "vocab.json", dir / "merges.txt"})},
      {"template", files_digest({dir / "tokenizer_config.json", dir / "chat_template.jinja",
                                 in.chat_template.empty() ? fs::path() : fs::path(in.chat_template)})},
      {"script", files_digest({script})}};
  return in;
}

json read_json(const fs::path &path) {
  std::ifstream in(path);
  if (!in) return json();
  json value = json::parse(in, nullptr, false);
  return value.is_discarded() ? json() : value;
}


// What changed between a prepared copy's fingerprint and now, in words ("" when nothing did).
std::string changes(const json &was, const json &now) {
  std::string what;
  for (const auto &[key, words] : std::vector<std::pair<std::string, std::string>>{
           {"data", "the data file"}, {"tokenizer", "the tokenizer"}, {"template", "the chat template"},
           {"script", "prepare_data.py"}, {"type", "data.type"}, {"text_field", "the text field"}})
    if (!was.is_object() || was.value(key, json()) != now[key]) what += (what.empty() ? "" : ", ") + words;
  return what;
}

// Runs prepare_data.py into `out`; its lines go to the log, its error line(s) into the thrown Error.
// A stop signal (SIGTERM, SIGINT, SIGHUP: CancelWritesOnSignal) ends the script, which is waited for,
// and throws: the caller removes what it left.
void run_script(const Inputs &in, const fs::path &out) {
  const char *env = std::getenv("ZFCORE_PYTHON");
  std::string python = env && *env ? env : "python3";
  fs::path script = PluginRegistry::builtin_dir().parent_path() / "prepare_data.py";
  ZF_REQUIRE(fs::exists(script), "%s: not found; it prepares chat, prompt_completion and text documents (reinstall "
             "zfcore)", script.c_str());
  std::vector<std::string> words = {python, script.string(), "--type", in.type, "--data", in.data, "--tokenizer",
                                    in.tokenizer, "--out", out.string()};
  if (!in.chat_template.empty()) words.insert(words.end(), {"--chat-template", in.chat_template});
  log_info(format("data: preparing %s with %s %s", in.data.c_str(), python.c_str(), script.c_str()));
  int pipe_fds[2];
  ZF_REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0, "cannot start %s: %s", python.c_str(), std::strerror(errno));
  const pid_t child = fork();
  if (child == 0) {  // its output and errors into the pipe; the signals zfcore ignores, as the default
    setpgid(0, 0);     // a group of its own, which a stop ends whole (the script and what it started)
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    std::signal(SIGPIPE, SIG_DFL);
    std::signal(SIGXFSZ, SIG_DFL);
    std::vector<char *> argv;
    for (std::string &word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  if (child > 0) setpgid(child, child);  // as the child does: whichever comes first
  if (child < 0) close(pipe_fds[0]);
  ZF_REQUIRE(child > 0, "cannot start %s: %s", python.c_str(), std::strerror(errno));
  std::string error, line;
  int signal = 0;
  char chunk[4096];
  for (;;) {
    if ((signal = write_cancel_signal()) != 0) break;
    pollfd ready{pipe_fds[0], POLLIN, 0};
    if (poll(&ready, 1, 200) <= 0) continue;  // a signal, or nothing yet: look at the signal again
    const ssize_t n = read(pipe_fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (chunk[i] != '\n') {
        line += chunk[i];
        continue;
      }
      if (line.rfind("error: ", 0) == 0 || !error.empty())
        error += (error.empty() ? line.substr(7) : "\n" + line);
      else
        log_info("data: " + line);
      line.clear();
    }
  }
  close(pipe_fds[0]);
  if (signal) kill(-child, SIGTERM);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (signal) throw Error(format("stopped by signal %d (%s)", signal, strsignal(signal)));
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  ZF_REQUIRE(code != 127, "cannot run %s to prepare %s: install Python 3 and transformers (apt-get install python3 "
             "python3-pip && python3 -m pip install transformers), or set ZFCORE_PYTHON to a Python that has them",
             python.c_str(), in.data.c_str());
  ZF_REQUIRE(code == 0, "%s", error.empty() ? format("%s %s failed with exit status %d", python.c_str(),
                                                     script.c_str(), code).c_str()
                                            : error.c_str());
}

// The owner its ownership marker names (runtime/files.hpp): what zfcore may replace in data.prepared_dir.
constexpr const char *kPreparedOwner = "zfcore prepared data";

// An exclusive lock on the file `name` in `root` for the life of the object: processes preparing the
// same data (the ranks of one host) take turns, and the first one's copy serves the others. The file
// is opened without following a link (a link of its name is refused, never written through).
class FileLock {
 public:
  FileLock(const Directory &root, const std::string &name) : fd_(root.open_append(name)) {
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      if (const int signal = write_cancel_signal()) {
        close(fd_);
        throw Error(format("stopped by signal %d (%s) while waiting for another process preparing the same data "
                           "(it holds %s): nothing was changed; run the command again to go on", signal,
                           strsignal(signal), root.path_of(name).c_str()));
      }
    }
  }
  ~FileLock() { close(fd_); }
  FileLock(const FileLock &) = delete;
  FileLock &operator=(const FileLock &) = delete;

 private:
  int fd_;
};

// Removes `name` from `root` when zfcore prepared it (its marker says so); else throws, naming it and
// what it is: zfcore never removes a directory or a link of the user's.
void remove_prepared(const Directory &root, const std::string &name, const char *what) {
  // A copy an older zfcore prepared, before the marker, is known by its record of what it was made from.
  if (root.kind_of(name) == "dir" && root.owner_of(name).empty()) {
    const Directory copy = root.subdirectory(name, false);
    const json source = copy.kind_of("source.json") == "file" ? read_json(copy.path_of("source.json")) : json();
    if (source.is_object() && source.value("fingerprint", json()).is_object())
      copy.write_atomically(kOwnerMarker, std::string(kPreparedOwner) + "\n");
  }
  const std::string why = root.remove_owned(name, kPreparedOwner);  // "" when missing
  ZF_REQUIRE(why.empty(), "%s, where zfcore puts %s; zfcore removes only what it prepared: move it "
             "away or remove it, or set data.prepared_dir elsewhere",
             why.c_str(), what);
}

}  // namespace

bool prepared_type(const RunConfig &config, const char *key) {
  std::string type = config.string("data", "type");
  if (type == "chat" || type == "prompt_completion") return true;
  std::string path = config.string("data", key);
  return type == "text" && (ends_with(path, ".json") || ends_with(path, ".jsonl") || ends_with(path, ".parquet"));
}

PreparedData prepare_data(const RunConfig &config, const char *key) {
  // SIGTERM, SIGINT or SIGHUP stop the preparation with an error saying what was kept and removed (not
  // at once, leaving the script writing into its copy); a run's stop request is passed on after it.
  CancelWritesOnSignal stop;
  Inputs in = inputs_of(config, key);
  const fs::path root_path = cache_root(config);
  // Every entry below is made under this descriptor, never by following a link (runtime/files.hpp).
  const Directory root = Directory::open(root_path.string(), true, "the directory for prepared data (data.prepared_dir)");
  uint64_t digest = kDigestSeed;
  for (const std::string &part : {in.data, in.type, in.tokenizer, in.chat_template})
    digest = digest_bytes(part.data(), part.size() + 1, digest);
  const std::string name = fs::path(in.data).stem().string() + "-" + hex(digest);
  const std::string failed = name + ".failed", staging = name + ".tmp";
  const fs::path directory = root_path / name;
  PreparedData prepared{directory.string(), (directory / "data.bin").string(), json()};
  const auto asked = fs::file_time_type::clock::now();
  FileLock lock(root, name + ".lock");
  const bool made = root.kind_of(name) == "dir";
  json source = made ? read_json(directory / "source.json") : json();
  std::string changed = changes(source.is_object() ? source.value("fingerprint", json()) : json(), in.fingerprint);
  if (changed.empty() && root.subdirectory(name, false).kind_of("data.bin") == "file") {
    prepared.record = read_json(directory / "record.json");
    log_info(format("data: %s: prepared data reused from %s", in.data.c_str(), directory.c_str()));
    return prepared;
  }
  // A process that held the lock before this one asked for it failed on the same inputs: its error.
  std::error_code ec;
  json failure = root.kind_of(failed) == "file" ? read_json(root_path / failed) : json();
  if (failure.is_object() && failure.value("fingerprint", json()) == in.fingerprint &&
      fs::last_write_time(root_path / failed, ec) >= asked)
    throw Error(failure.value("error", std::string("preparing the data failed")));
  if (source.is_object())
    log_info(format("data: %s: %s changed since %s was prepared; preparing it again", in.data.c_str(),
                    changed.c_str(), directory.c_str()));
  remove_prepared(root, staging, "the data it is preparing");  // an interrupted preparation's (ours)
  root.create_owned(staging, kPreparedOwner);
  try {
    run_script(in, root_path / staging);
    root.subdirectory(staging, false)
        .write_atomically("source.json", json{{"fingerprint", in.fingerprint}, {"data", in.data},
                                              {"tokenizer", in.tokenizer}}.dump(1) + "\n");
    if (write_cancel_signal()) throw Error("stopped");  // the copy is whole, but the user asked to stop
  } catch (const Error &e) {
    const int signal = write_cancel_signal();
    if (!signal)  // a stop is no failure of these inputs: no record for the processes waiting on the lock
      root.write_atomically(failed, json{{"fingerprint", in.fingerprint}, {"error", e.what()}}.dump(1) + "\n");
    const std::string left = root.remove_owned(staging, kPreparedOwner);
    if (!signal) throw;
    throw Error(format("stopped by signal %d (%s) while preparing %s: prepare_data.py was ended, and its unfinished "
                       "copy %s %s; %s. Nothing else was changed: run the command again to prepare the data",
                       signal, strsignal(signal), in.data.c_str(), root.path_of(staging).c_str(),
                       left.empty() ? "removed" : ("kept: " + left).c_str(),
                       made ? ("the copy prepared before, " + directory.string() + ", is kept").c_str()
                            : "no copy was prepared before"));
  }
  remove_prepared(root, name, "the prepared data");  // the copy made from what changed: zfcore made it
  const std::string moved = root.rename_entry(staging, name);
  ZF_REQUIRE(moved.empty(), "%s: cannot move the prepared data into place: %s", directory.c_str(), moved.c_str());
  prepared.record = read_json(directory / "record.json");
  return prepared;
}

}  // namespace zf
