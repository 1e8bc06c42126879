// fuzz_target.hpp: the contract every fuzz target of this directory checks.
//
// A target hands its input to one of the core's parsers. Whatever the bytes, the parser must
// either accept them or throw a clear located error, which here means:
//   - a zf::Error, the core's user-facing error (what zfcore prints as "error: ..."),
//   - whose message names the input (the file name the target gives the parser),
//   - is not an internal error (a message starting with "internal"), and
//   - is at most kMaxMessageBytes long and says more than the name (an excerpt of the input,
//     never all of it).
// Anything else is a finding: another exception type (nlohmann::json::type_error,
// std::out_of_range, std::bad_alloc, ...), a crash, a sanitizer report, a hang (libFuzzer's
// -timeout), or a check of the target on what the parser accepted. A finding prints what went
// wrong and aborts, so that libFuzzer (tools/fuzz.sh) and the corpus replay (replay_main.cpp,
// run by ctest) both report it with the input. The replay checks one thing more, from the
// file's name: valid inputs (fixture_*, valid_*, example_*) are accepted, and bad ones
// (reliability_*, bad_*) are rejected.
#pragma once

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace zf::fuzz {

constexpr size_t kMaxMessageBytes = 1024;

// The input being run, and the error it was rejected with ("" when accepted): the replay checks
// these against the file's name.
inline std::string current_input, rejection;

[[noreturn]] inline void fail(const std::string &what) {
  std::fprintf(stderr, "fuzz target: FAILED: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A check on what the parser accepted.
inline void require(bool ok, const std::string &what) {
  if (!ok) fail(what);
}

// The input as text; warnings of the parsers off (they are not findings, and they would flood
// the fuzzer's output).
inline std::string input_text(const uint8_t *data, size_t size) {
  log_set_level(ZF_LOG_ERROR);
  current_input.assign(reinterpret_cast<const char *>(data), size);
  rejection.clear();
  return current_input;
}

// Runs parse(): true when it returned, false when it threw a clear located error naming `name`;
// fails (aborts) on anything else.
template <class Parse>
bool accepts(const std::string &name, Parse &&parse) {
  try {
    parse();
    return true;
  } catch (const Error &e) {
    std::string message = e.what();
    if (message.find(name) == std::string::npos) fail("the error does not name the input " + name + ": " + message);
    if (message.rfind("internal", 0) == 0) fail("an internal error: " + message);
    if (message.size() > kMaxMessageBytes)
      fail("an error message of " + std::to_string(message.size()) + " bytes: " + message.substr(0, 300) + "...");
    if (message.size() < name.size() + 8) fail("an error message that says nothing: " + message);
    if (current_input.size() > 200 && message.find(current_input) != std::string::npos)
      fail("an error message that holds the whole input: " + message.substr(0, 300) + "...");
    rejection = message;
    return false;
  } catch (const std::exception &e) {
    fail(std::string("an exception that is not a zf::Error: ") + e.what());
  }
}

// Runs step(), which must not throw at all (work on an accepted input, such as encoding text).
template <class Step>
void must_succeed(const char *what, Step &&step) {
  try {
    step();
  } catch (const std::exception &e) {
    fail(std::string(what) + " threw: " + e.what());
  }
}

}  // namespace zf::fuzz
