// Two error tiers (shared/DESIGN.md):
//  - lt::Error: a user, input or environment problem. The message says what was wrong,
//    where, and what to do about it. Thrown, caught at the CLI, printed, exit code 1.
//  - LT_ASSERT: a broken invariant inside lazytrain. Aborts with file:line; never caught.
#pragma once

#include <stdexcept>
#include <string>

namespace lt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(printable(message)) {}
  // what: what was wrong; where: the file, tensor or field; fix: what the user can do.
  Error(const std::string& what, const std::string& where, const std::string& fix)
      : std::runtime_error(printable(what + " (in " + where + ")" + (fix.empty() ? "" : ": " + fix))) {}

  // The message with each NUL byte written as "\0": what() is a C string, and a NUL that
  // came from the input being quoted (a name in a damaged file) would cut off the rest,
  // the place and the fix among it.
  static std::string printable(std::string message);
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace lt

#define LT_ASSERT(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) ::lt::assert_fail(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)
