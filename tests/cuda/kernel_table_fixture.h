// A test of the CUDA kernel table: a GPU is required (the test skips without one, saying
// why) and the table's kernels run on a stream of their own for the test's lifetime.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "cuda_test_util.h"
#include "kernels/cuda/cuda_kernel_table.h"

namespace lt::test {

class CudaTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LT_REQUIRE_CUDA_DEVICE();
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    cuda::set_kernel_table_stream(stream_);
  }
  void TearDown() override {
    cuda::set_kernel_table_stream(nullptr);
    if (stream_) cudaStreamDestroy(stream_);
  }
  const KernelTable& k() const { return cuda::kernel_table(); }
  // Everything issued is done: the uploads before a table call (the table's stream does not
  // wait for the default stream), both runs before a comparison.
  void sync() { cuda::device_synchronize(); }

  cudaStream_t stream_ = nullptr;
};

}  // namespace lt::test
