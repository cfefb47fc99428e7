#include "data/split_behavior.h"

#include <algorithm>

#include "core/error.h"

namespace lt::data {
namespace {

struct Piece {
  size_t begin, end;
  bool match;
};

// Cuts `s` into the pieces between and at the matches (HF's find_matches).
std::vector<Piece> match_pieces(const Regex& re, const std::string& s, bool invert) {
  std::vector<Piece> out;
  size_t prev = 0;
  for (auto [b, e] : re.find_all(s)) {
    if (b > prev) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < s.size()) out.push_back({prev, s.size(), invert});
  return out;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_ranges(const Regex& pattern, const std::string& s,
                                                    SplitBehavior behavior, bool invert) {
  using B = SplitBehavior;
  const std::vector<Piece> pieces = match_pieces(pattern, s, invert);
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case B::kRemoved:
      for (const auto& p : pieces)
        if (!p.match) out.emplace_back(p.begin, p.end);
      break;
    case B::kIsolated:
      for (const auto& p : pieces) out.emplace_back(p.begin, p.end);
      break;
    case B::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& p : pieces) {
        if (p.match && !prev_match && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        prev_match = p.match;
      }
      break;
    }
    case B::kMergedWithNext: {
      bool next_match = false;
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->match && !next_match && !out.empty())
          out.back().first = it->begin;
        else
          out.emplace_back(it->begin, it->end);
        next_match = it->match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case B::kContiguous: {
      bool prev_match = false;
      for (const auto& p : pieces) {
        if (p.match && prev_match && !out.empty())
          out.back().second = p.end;
        else
          out.emplace_back(p.begin, p.end);
        prev_match = p.match;
      }
      break;
    }
  }
  return out;
}

SplitBehavior parse_split_behavior(const nlohmann::json& j, SplitBehavior fallback,
                                   const std::string& where) {
  using B = SplitBehavior;
  if (!j.contains("behavior") || j["behavior"].is_null()) return fallback;
  if (!j["behavior"].is_string())
    throw Error("\"behavior\" must be a string, not " + j["behavior"].dump(), where,
                "use Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
  const std::string b = j["behavior"];
  if (b == "Removed") return B::kRemoved;
  if (b == "Isolated") return B::kIsolated;
  if (b == "MergedWithPrevious") return B::kMergedWithPrevious;
  if (b == "MergedWithNext") return B::kMergedWithNext;
  if (b == "Contiguous") return B::kContiguous;
  throw Error("unknown split behavior \"" + b + "\"", where,
              "use Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

}  // namespace lt::data
