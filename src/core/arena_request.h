// One compute-tier allocation asked for by a plan's schedule: a name (for reports and
// errors), its bytes, and its lifetime in plan windows (live from the start of
// first_window to the end of last_window). plan/stream_schedule.h derives them from a
// plan; memory/arena_layout.h chooses their offsets.
#pragma once

#include <cstddef>
#include <string>

namespace lt {

struct ArenaRequest {
  std::string name;
  size_t bytes = 0;
  int first_window = 0;
  int last_window = 0;
};

}  // namespace lt
