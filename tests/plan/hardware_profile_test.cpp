#include "plan/hardware_profile.h"

#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lt {
namespace {

TEST(HardwareProfile, ShippedProfilesLoadWithSources) {
  for (const char* name : {"h800", "rtx3090", "h200"}) {
    HardwareProfile p = load_hardware_profile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_GT(p.effective_flops(), 0);
    // Every number says where it comes from.
    EXPECT_EQ(p.sources.size(), 12u) << name;
    for (const auto& [field, source] : p.sources) EXPECT_NE(source, "unspecified") << name << " " << field;
  }
  HardwareProfile h800 = load_hardware_profile("h800");
  EXPECT_DOUBLE_EQ(h800.compute_memory_bytes, 80e9);
  EXPECT_DOUBLE_EQ(h800.default_cap_bytes, 70e9);
  EXPECT_DOUBLE_EQ(h800.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(h800.h2d_bw, 12e9);
  EXPECT_DOUBLE_EQ(h800.nvme_read_bw, 2.83e9);
  EXPECT_DOUBLE_EQ(h800.nvme_write_bw, 3.35e9);
  EXPECT_EQ(h800.sources.at("links.h2d_gbps"), "paper");
  HardwareProfile h200 = load_hardware_profile("h200");
  EXPECT_EQ(h200.sources.at("links.h2d_gbps"), "assumed");  // must be calibrated
}

TEST(HardwareProfile, RoundTripsThroughJson) {
  HardwareProfile p = load_hardware_profile("rtx3090");
  HardwareProfile q = parse_hardware_profile(hardware_profile_to_json(p), "round trip");
  EXPECT_DOUBLE_EQ(q.peak_flops, p.peak_flops);
  EXPECT_DOUBLE_EQ(q.h2d_bw, p.h2d_bw);
  EXPECT_EQ(q.sources, p.sources);
  EXPECT_EQ(q.weight_bytes, 2);  // bf16 when the file does not say
  EXPECT_EQ(q.grad_bytes, 2);
  p.weight_bytes = p.grad_bytes = 4;
  HardwareProfile r = parse_hardware_profile(hardware_profile_to_json(p), "round trip");
  EXPECT_EQ(r.weight_bytes, 4);
  EXPECT_EQ(r.grad_bytes, 4);
  EXPECT_EQ(r.bf16_peak_flops, 0.0);  // optional, absent
  p.bf16_peak_flops = 2 * p.peak_flops;
  HardwareProfile b = parse_hardware_profile(hardware_profile_to_json(p), "round trip");
  EXPECT_DOUBLE_EQ(b.bf16_peak_flops, p.bf16_peak_flops);
}

TEST(HardwareProfile, RejectsBadInput) {
  EXPECT_THROW(load_hardware_profile("no-such-profile"), Error);
  nlohmann::json j = hardware_profile_to_json(load_hardware_profile("h800"));
  j["weight_bytes"] = 3;
  EXPECT_THROW(parse_hardware_profile(j, "test"), Error);
  j["weight_bytes"] = 2;
  j["grad_bytes"] = 8;
  EXPECT_THROW(parse_hardware_profile(j, "test"), Error);
  j["grad_bytes"] = 2;
  j["compute"]["efficiency"] = 1.5;
  EXPECT_THROW(parse_hardware_profile(j, "test"), Error);
  j["compute"].erase("efficiency");
  EXPECT_THROW(parse_hardware_profile(j, "test"), Error);
}

}  // namespace
}  // namespace lt

namespace lt {
namespace {

// The optional fields: the ranks' link rate and the threads the rates were measured on.
TEST(HardwareProfile, OptionalNetworkRateAndThreadsRoundTripAndAreChecked) {
  HardwareProfile p = load_hardware_profile("h800");
  EXPECT_EQ(p.network_bw, 0);
  EXPECT_EQ(p.threads, 0);
  nlohmann::json j = hardware_profile_to_json(p);
  EXPECT_FALSE(j["links"].contains("network_gbps"));
  EXPECT_FALSE(j["host"].contains("threads"));
  j["links"]["network_gbps"] = 12.5;
  j["host"]["threads"] = {{"value", 8}, {"source", "measured"}};
  const HardwareProfile q = parse_hardware_profile(j, "test");
  EXPECT_DOUBLE_EQ(q.network_bw, 12.5e9);
  EXPECT_EQ(q.threads, 8);
  const HardwareProfile r = parse_hardware_profile(hardware_profile_to_json(q), "round trip");
  EXPECT_DOUBLE_EQ(r.network_bw, q.network_bw);
  EXPECT_EQ(r.threads, 8);
  for (const auto& [section, key, bad] : {std::tuple{"links", "network_gbps", nlohmann::json(0)},
                                           std::tuple{"host", "threads", nlohmann::json(2.5)},
                                           std::tuple{"host", "threads", nlohmann::json(0)}}) {
    nlohmann::json b = j;
    b[section][key] = bad;
    EXPECT_THROW(parse_hardware_profile(b, "test"), Error) << section << "." << key << " = " << bad.dump();
  }
}

}  // namespace
}  // namespace lt
