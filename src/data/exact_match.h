// Exact-match scoring of GSM8K-format answers: the final answer is the number after
// "####". Generated text may run on after it (another question, padding); the first
// "####" decides, as lm-evaluation-harness's strict-match filter does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lt::data {

// The number after the first "####": optional spaces, optional '-', digits with optional
// ',' separators and one optional decimal part. Returned normalized (no commas, no
// leading '+', no trailing ".0"/"." zeros); nullopt when there is no such number.
std::optional<std::string> extract_final_answer(std::string_view text);

// True when `generated` has a final answer equal to the one in `reference`.
bool exact_match(std::string_view generated, std::string_view reference);

// Fraction of pairs that match (0 for empty input).
double exact_match_rate(const std::vector<std::string>& generated,
                        const std::vector<std::string>& references);

}  // namespace lt::data
