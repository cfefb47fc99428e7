// The streaming executor's step asks nothing of where the compute tier is: its weight
// source and gradient sink (exec/weight_source.h, exec/gradient_sink.h) are chosen once
// when it is built, and it finds buffers by typed id, not by name. This reads the step's
// source files and fails on any code (comments aside) that asks the backend whether it
// computes on host memory, keeps its own bf16 slot, looks a buffer up by a string, or
// allocates or copies compute-tier memory itself (the backend does: compute_memory,
// copy_within_compute).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lt {
namespace {

// The file's code with // comments removed, one entry per line.
std::vector<std::string> code_lines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    const size_t comment = line.find("//");
    lines.push_back(comment == std::string::npos ? line : line.substr(0, comment));
  }
  return lines;
}

TEST(ExecutorStepSource, NoComputeTierBranchesOrStringLookups) {
  const std::string exec = std::string(LT_TESTS_DIR) + "/../src/exec/";
  const char* forbidden[] = {"host_is_compute", "bf16_slot_", "buf(\"",   "acquire(\"",
                             "release(\"",       "aligned_alloc", "memcpy"};
  for (const char* file : {"streaming_executor.cpp", "streaming_head.cpp", "streaming_boundaries.cpp"}) {
    const std::vector<std::string> lines = code_lines(exec + file);
    EXPECT_GT(lines.size(), 10u) << file;
    for (size_t i = 0; i < lines.size(); ++i)
      for (const char* f : forbidden)
        EXPECT_EQ(lines[i].find(f), std::string::npos) << file << ":" << i + 1 << " uses " << f << ": " << lines[i];
  }
}

}  // namespace
}  // namespace lt
