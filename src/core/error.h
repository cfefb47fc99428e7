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
  explicit Error(const std::string& message) : std::runtime_error(message) {}
  // what: what was wrong; where: the file, tensor or field; fix: what the user can do.
  Error(const std::string& what, const std::string& where, const std::string& fix)
      : std::runtime_error(what + " (in " + where + ")" + (fix.empty() ? "" : ": " + fix)) {}
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace lt

#define LT_ASSERT(cond, ...)                                                        \
  do {                                                                              \
    if (!(cond)) ::lt::assert_fail(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)
