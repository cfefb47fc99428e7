// One compute-tier allocation asked for by a plan's schedule: a name (for reports and
// errors), its bytes, its lifetime in plan windows (live from the start of first_window
// to the end of last_window), and where it must lie relative to another request. plan/stream_schedule.h derives them from a
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
  // The index of the request this one starts right after, with no gap, so that the two
  // read as one tensor while both are live (a boundary's compute-tier rows, held from
  // forward to backward, and its other rows, there only around their uses); -1: none.
  // Several requests may follow the same one at different times.
  int follows = -1;
};

}  // namespace lt
