// How HF tokenizers cuts a string at the matches of a pattern (its
// SplitDelimiterBehavior): what happens to the delimiters. Shared by the Split, Digits,
// Punctuation, Whitespace and Metaspace pre-tokenizers.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/regex.h"

namespace lt::data {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// [begin, end) byte ranges of the pieces of `s`, in order (empty pieces never appear).
// With invert, the pieces between matches are the delimiters instead of the matches.
std::vector<std::pair<size_t, size_t>> split_ranges(const Regex& pattern, const std::string& s,
                                                    SplitBehavior behavior, bool invert);

// The "behavior" field ("Isolated" etc.), `fallback` when absent; lt::Error naming
// `where` for an unknown value.
SplitBehavior parse_split_behavior(const nlohmann::json& j, SplitBehavior fallback,
                                   const std::string& where);

}  // namespace lt::data
