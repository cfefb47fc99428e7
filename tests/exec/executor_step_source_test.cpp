// The streaming executor's step asks nothing of where the compute tier is: its weight
// source and gradient sink (exec/weight_source.h, exec/gradient_sink.h) are chosen once
// when it is built, and it finds buffers by typed id, not by name. This reads the step's
// source files and fails on any code (comments aside) that asks the backend whether it
// computes on host memory, keeps its own bf16 slot, looks a buffer up by a string, or
// allocates or copies compute-tier memory itself (the backend does: compute_memory,
// copy_within_compute).
//
// The step and the layer code it runs reach their kernels only through a kernel table
// (kernels/kernel_table.h, the backend's): no file here includes kernels/cpu/, and none
// calls an entry's function by its bare name. The entries are read from kernel_table.h,
// so a new one is covered as soon as it is declared.
#include <fstream>
#include <regex>
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

// Every kernel table entry's name: the "(*name)(" of its function pointer.
std::vector<std::string> kernel_table_entries(const std::string& path) {
  std::vector<std::string> names;
  const std::regex pointer(R"(\(\*(\w+)\)\()");
  for (const std::string& line : code_lines(path))
    for (std::sregex_iterator m(line.begin(), line.end(), pointer), end; m != end; ++m) names.push_back((*m)[1]);
  return names;
}

TEST(ExecutorStepSource, KernelsOnlyThroughTheTable) {
  const std::string src = std::string(LT_TESTS_DIR) + "/../src/";
  std::vector<std::string> entries = kernel_table_entries(src + "kernels/kernel_table.h");
  ASSERT_GT(entries.size(), 20u) << "kernel_table.h's entries were not found";
  entries.push_back("sum_of_squares_f64");  // the CPU kernel's own name for the table's sum_of_squares
  // A call by bare (or namespace-qualified) name, not through a table's . or ->.
  std::vector<std::regex> calls;
  for (const std::string& e : entries) calls.emplace_back("(^|[^\\w.>])" + e + "\\s*\\(");
  for (const char* file : {"exec/streaming_executor.cpp", "exec/streaming_head.cpp", "exec/streaming_boundaries.cpp",
                           "exec/weight_source.cpp", "exec/gradient_sink.cpp", "layers/decoder_block.cpp",
                           "layers/linear_attention_mixer.cpp", "layers/model_step.cpp"}) {
    const std::vector<std::string> lines = code_lines(src + file);
    EXPECT_GT(lines.size(), 10u) << file;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i].find("#include \"kernels/cpu/"), std::string::npos)
          << file << ":" << i + 1 << " includes a CPU kernel: " << lines[i];
      for (size_t e = 0; e < calls.size(); ++e)
        EXPECT_FALSE(std::regex_search(lines[i], calls[e]))
            << file << ":" << i + 1 << " calls " << entries[e] << " directly: " << lines[i];
    }
  }
}

}  // namespace
}  // namespace lt
