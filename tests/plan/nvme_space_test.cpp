// The NVMe budget against the free space of the disk it will live on (issue 14, part 4):
// refused at plan time, with the sizes and the directory in the message.
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "memory/nvme_test_util.h"
#include "plan/nvme_space.h"
#include "test_util.h"

namespace lt {
namespace {

TEST(NvmeSpace, ExplicitBudgetAboveTheFreeSpaceIsAnError) {
  PlanRequest req;
  req.hardware.nvme_capacity_bytes = 2e12;
  req.nvme_act_budget_bytes = 32e9;
  const std::string m = test::error_of([&] { limit_nvme_to_free_space(req, 10e9, "/mnt/nvme", "--offload-dir"); });
  EXPECT_NE(m.find("32.000 GB exceeds the 10.000 GB free in /mnt/nvme"), std::string::npos) << m;
  EXPECT_NE(m.find("--act-budget"), std::string::npos) << m;
}

TEST(NvmeSpace, WithoutABudgetTheCapacityBecomesTheFreeSpace) {
  PlanRequest req;
  req.hardware.nvme_capacity_bytes = 2e12;
  limit_nvme_to_free_space(req, 10e9, "/mnt/nvme", "--offload-dir");
  EXPECT_EQ(req.hardware.nvme_capacity_bytes, 10e9);
  EXPECT_EQ(req.nvme_budget(4e9), 6e9) << "paged states and activations share the free space";
  limit_nvme_to_free_space(req, 20e9, "/mnt/nvme", "--offload-dir");
  EXPECT_EQ(req.hardware.nvme_capacity_bytes, 10e9) << "never raised above the profile's";
}

TEST(NvmeSpace, PlanThatNeedsMoreThanIsFree) {
  Plan p;
  p.predicted_peak.nvme = 5e9;
  p.nvme_state_layers = {10, 11};
  p.state_bytes_per_layer = 1e9;
  EXPECT_NO_THROW(check_plan_nvme_fits(p, 7e9, "/mnt/nvme", "plan.json"));
  const std::string m = test::error_of([&] { check_plan_nvme_fits(p, 6.5e9, "/mnt/nvme", "plan.json"); });
  EXPECT_NE(m.find("7.000 GB on NVMe (activations 5.000 GB, optimizer states 2.000 GB)"), std::string::npos) << m;
  EXPECT_NE(m.find("6.500 GB free"), std::string::npos) << m;
  EXPECT_NE(m.find("plan.json"), std::string::npos) << m;
}

TEST(NvmeSpace, MissingDirectory) {
  const std::string m = test::error_of([] { free_disk_bytes("/no/such/offload/dir", "--offload-dir"); });
  EXPECT_NE(m.find("/no/such/offload/dir does not exist"), std::string::npos) << m;
}

// `lazytrain plan` with an NVMe budget larger than a 1 MiB disk: exit 1 and the message,
// before any solve.
TEST(NvmeSpace, PlanCommandRefusesABudgetTheDiskCannotHold) {
  test::TempDir dir("nvme-space-plan");
  std::string why;
  auto mnt = test::ScratchMount::tmpfs(dir.path() / "mnt", 1 << 20, &why);
  if (!mnt) GTEST_SKIP() << why;
  const std::string cmd = "'" + std::string(LT_BINARY_DIR) + "/lazytrain' plan --model qwen3.6-27b --hardware h800 " +
                          "--batch 8 --seq 1024 --act-budget cpu=15,nvme=32 --offload-dir '" + mnt->path().string() +
                          "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  const int status = pclose(f);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("32.000 GB exceeds the"), std::string::npos) << out;
  EXPECT_NE(out.find(mnt->path().string()), std::string::npos) << out;
}

}  // namespace
}  // namespace lt
