#include "runtime/error.hpp"

#include "runtime/input.hpp"

#include <c10/util/Exception.h>

namespace zf {

std::string error_message(const std::exception &error) {
  if (dynamic_cast<const Error *>(&error)) return with_long_words_cut(error.what());
  if (auto *torch_error = dynamic_cast<const c10::Error *>(&error))
    return with_long_words_cut(std::string("libtorch: ") + torch_error->what_without_backtrace());
  return with_long_words_cut(std::string("internal error: ") + error.what());
}

}  // namespace zf
