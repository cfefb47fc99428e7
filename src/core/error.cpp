#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace lt {

std::string Error::printable(std::string message) {
  for (size_t i = message.find('\0'); i != std::string::npos; i = message.find('\0', i + 2))
    message.replace(i, 1, "\\0");
  return message;
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "lazytrain internal error: %s:%d: assertion `%s` failed%s%s\n", file, line,
               expr, msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace lt
