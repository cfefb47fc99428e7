// A non-owning, typed, contiguous (row-major) view of a tensor.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lt {

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>());
}
std::string shape_str(const Shape& s);  // "[2, 3]"

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  int64_t numel() const { return shape_numel(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

}  // namespace lt
