// input.hpp: the input rule, for every file zfcore reads (a user, or anyone, hands it over). Only
// regular files are opened (a FIFO or a device would block or never end), sizes are bounded, JSON
// nesting is bounded before parsing, a path named inside a file stays inside that file's directory,
// and what goes into an error message is cut to an excerpt. Writing: runtime/files.hpp.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace zf {

constexpr int kMaxJsonDepth = 256;

// "" when path is a regular file (after following links), else why not: "is a directory",
// "is a FIFO (named pipe), not a regular file", or the system's error ("No such file or directory").
std::string regular_file_problem(const std::string &path);

// Opens a regular file read-only (without blocking on a FIFO); -1 with *why set otherwise.
int open_regular_file(const std::string &path, std::string *why);

// Reads the whole regular file into *text; "" on success, else why not (including "is larger
// than N bytes" past max_bytes).
std::string read_regular_file(const std::string &path, uint64_t max_bytes, std::string *text);

// One line of a text file read by for_each_line: its text without the '\n' (the first max_line_bytes
// of it when too_long), its number (1 for the first), and whether a '\n' ended it (a last line cut
// short by a crash has none).
struct TextLine {
  std::string text;
  uint64_t number = 0;
  bool complete = true, too_long = false;
};

// Calls take() for each line of the regular file at `path`, a block at a time: a file of any size is
// read in bounded memory (a line past max_line_bytes is passed cut, too_long set, and its rest
// skipped). take() returns false to stop. "" on success, else why the file cannot be read.
std::string for_each_line(const std::string &path, size_t max_line_bytes,
                          const std::function<bool(const TextLine &)> &take);

// "" when `relative`, a path one file names for another of `directory` (a weight_map entry, a
// shard), stays inside `directory`: not absolute, no ".." component, no link on the way leading
// outside it (but into the Hugging Face cache's blobs/ from its snapshots/<revision>/, as the cache
// links every file); else why not ("is an absolute path", "leaves the directory through ..", "is a
// link to ... outside ...").
std::string path_inside_problem(const std::string &directory, const std::string &relative);

// The file's JSON, read through the rule (a regular file of at most max_bytes, nesting bounded):
// throws zf::Error "<path>: ..." saying what is wrong.
nlohmann::json read_json_file(const std::string &path, uint64_t max_bytes = 16 << 20);

// Parses JSON text, first checking that arrays and objects nest at most kMaxJsonDepth deep;
// throws zf::Error "<source>: not valid JSON: ..." with an excerpt of the parser's message.
nlohmann::json parse_json(const std::string &text, const std::string &source);

// text cut to at most max_chars characters ("..." marks the cut), for error messages.
std::string excerpt(const std::string &text, size_t max_chars = 100);

// `message` with every run of more than max_chars characters without a blank (a huge value a user
// passed, echoed by a check) cut to an excerpt: what an error prints stays readable.
std::string with_long_words_cut(const std::string &message, size_t max_chars = 300);

}  // namespace zf
