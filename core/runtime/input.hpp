// input.hpp: reading files a user (or anyone) hands to zfcore. Only regular files are opened (a
// FIFO or a device would block or never end), sizes are bounded, JSON nesting is bounded before
// parsing, and what goes into an error message is cut to an excerpt.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
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

// Parses JSON text, first checking that arrays and objects nest at most kMaxJsonDepth deep;
// throws zf::Error "<source>: not valid JSON: ..." with an excerpt of the parser's message.
nlohmann::json parse_json(const std::string &text, const std::string &source);

// text cut to at most max_chars characters ("..." marks the cut), for error messages.
std::string excerpt(const std::string &text, size_t max_chars = 100);

// `message` with every run of more than max_chars characters without a blank (a huge value a user
// passed, echoed by a check) cut to an excerpt: what an error prints stays readable.
std::string with_long_words_cut(const std::string &message, size_t max_chars = 300);

}  // namespace zf
