#include "runtime/input.hpp"

#include "runtime/error.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace zf {
namespace {

std::string kind_problem(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "is a directory, not a file";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  return "is not a regular file";
}

// The byte offset where nesting first exceeds max_depth, or npos.
size_t too_deep_at(const std::string &text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// The parser's message without the bytes it read ("; last read: 'root:x'"): a file that is not the
// JSON it claims to be (a link to another file) must not show its content in an error; the line
// and column say where.
std::string without_bytes_read(std::string message) {
  const size_t begin = message.find("; last read: '");
  if (begin == std::string::npos) return message;
  const size_t expected = message.find("'; expected", begin);
  message.erase(begin, expected == std::string::npos ? std::string::npos : expected + 1 - begin);
  return message;
}

}  // namespace

std::string regular_file_problem(const std::string &path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return std::strerror(errno);
  return kind_problem(info.st_mode);
}

int open_regular_file(const std::string &path, std::string *why) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = std::strerror(errno);
    return -1;
  }
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    *why = std::strerror(errno);
    close(fd);
    return -1;
  }
  if (std::string problem = kind_problem(info.st_mode); !problem.empty()) {
    *why = problem;
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string &path, uint64_t max_bytes, std::string *text) {
  std::string why;
  int fd = open_regular_file(path, &why);
  if (fd < 0) return why;
  struct stat info {};
  fstat(fd, &info);
  if (uint64_t(info.st_size) > max_bytes) {
    close(fd);
    return format("is larger than %llu bytes (%llu)", (unsigned long long)max_bytes, (unsigned long long)info.st_size);
  }
  text->clear();
  text->reserve(size_t(info.st_size));
  char buffer[1 << 16];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = std::strerror(errno);
    if (n <= 0) break;
    if (text->size() + size_t(n) > max_bytes) {
      why = format("is larger than %llu bytes", (unsigned long long)max_bytes);
      break;
    }
    text->append(buffer, size_t(n));
  }
  close(fd);
  return why;
}

std::string for_each_line(const std::string &path, size_t max_line_bytes,
                          const std::function<bool(const TextLine &)> &take) {
  std::string why;
  int fd = open_regular_file(path, &why);
  if (fd < 0) return why;
  TextLine line;
  line.number = 1;
  bool going = true;
  char buffer[1 << 16];
  while (going) {
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = std::strerror(errno);
    if (n <= 0) break;
    for (const char *p = buffer, *end = buffer + n; p < end && going;) {
      const char *newline = static_cast<const char *>(std::memchr(p, '\n', size_t(end - p)));
      const char *stop = newline ? newline : end;
      const size_t room = max_line_bytes - std::min(max_line_bytes, line.text.size());
      if (size_t(stop - p) > room) line.too_long = true;
      line.text.append(p, std::min(size_t(stop - p), room));
      p = newline ? newline + 1 : end;
      if (!newline) continue;
      going = take(line);
      line.text.clear();
      line.too_long = false;
      ++line.number;
    }
  }
  close(fd);
  if (going && why.empty() && (!line.text.empty() || line.too_long)) {
    line.complete = false;
    take(line);
  }
  return why;
}

std::string path_inside_problem(const std::string &directory, const std::string &relative) {
  namespace fs = std::filesystem;
  if (relative.empty()) return "is empty";
  const fs::path path(relative);
  if (path.is_absolute()) return "is an absolute path: it must name a file inside " + excerpt(directory);
  for (const fs::path &part : path)
    if (part == "..") return "leaves " + excerpt(directory) + " through '..'";
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::path(directory), ec);
  if (ec) return excerpt(directory) + ": " + ec.message();
  const fs::path resolved = fs::weakly_canonical(root / path, ec);  // links on the way followed
  if (ec) return ec.message();
  auto inside = [&](const fs::path &top) {
    return std::mismatch(top.begin(), top.end(), resolved.begin(), resolved.end()).first == top.end();
  };
  // The Hugging Face cache keeps a model's files in blobs/ and links them from snapshots/<revision>/.
  const fs::path blobs = root.parent_path().parent_path() / "blobs";
  const bool cache_blob = root.parent_path().filename() == "snapshots" && inside(blobs);
  if (!inside(root) && !cache_blob)
    return "leads outside " + excerpt(directory) + " (to " + excerpt(resolved.string()) + ") through a link";
  return "";
}

nlohmann::json read_json_file(const std::string &path, uint64_t max_bytes) {
  std::string text;
  std::string why = read_regular_file(path, max_bytes, &text);
  ZF_REQUIRE(why.empty(), "%s: cannot read: %s", path.c_str(), why.c_str());
  return parse_json(text, path);
}

nlohmann::json parse_json(const std::string &text, const std::string &source) {
  size_t deep = too_deep_at(text, kMaxJsonDepth);
  ZF_REQUIRE(deep == std::string::npos, "%s: not valid JSON: arrays and objects nest deeper than %d levels (at byte %zu)",
             source.c_str(), kMaxJsonDepth, deep);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception &e) {
    throw Error(format("%s: not valid JSON: %s", source.c_str(), excerpt(without_bytes_read(e.what()), 200).c_str()));
  }
}

namespace {
// `at`, moved back to the start of the UTF-8 character it falls inside (continuation bytes are 10xxxxxx).
size_t character_start(const std::string &text, size_t at) {
  for (size_t back = 0; at > 0 && back < 3 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80; ++back) --at;
  return at;
}
}  // namespace

std::string excerpt(const std::string &text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  return text.substr(0, character_start(text, max_chars)) + "...";
}

std::string with_long_words_cut(const std::string &message, size_t max_chars) {
  std::string out;
  size_t begin = 0;
  while (begin < message.size()) {
    size_t end = message.find_first_of(" \n", begin);
    if (end == std::string::npos) end = message.size();
    const std::string word = message.substr(begin, end - begin);
    out += word.size() <= max_chars ? word : format("%s...(%zu characters)", word.substr(0, character_start(word, 100)).c_str(), word.size());
    if (end < message.size()) out += message[end];
    begin = end + 1;
  }
  return out;
}

}  // namespace zf
