// A backend like cpu (the compute tier is host RAM, copies are memcpy) that runs a kernel
// table the test gives: the CPU's with some entries replaced, to see what the code
// under test calls them with or to make them take a known time. Header-only (the test
// build globs only *_test.cpp).
#pragma once

#include <cstring>

#include "exec/backend.h"

namespace lt::test {

class TableBackend final : public Backend {
 public:
  explicit TableBackend(const KernelTable& table) : table_(table) {}
  const char* name() const override { return "cpu with a test's table"; }
  bool host_is_compute() const override { return true; }
  void copy_to_compute(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}
  const KernelTable& kernels() const override { return table_; }

 private:
  KernelTable table_;
};

}  // namespace lt::test
