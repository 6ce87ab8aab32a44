// The argument checks an op's enqueue makes on the tensors it is handed (shape and dtype as created, no
// negative dims), with errors that name the op and the argument. Shared by the op families' .cpp files.
#pragma once
#include <string_view>

#include "layers/op.hpp"

namespace cldl {

inline void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != dt) invalid(op, "{} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
}

inline void check_dims(std::string_view op, const Shape& s, std::string_view what) {
  for (auto d : s.dims)
    if (d < 0) invalid(op, "{} has a negative dimension in shape {}", what, s.str());
}

}  // namespace cldl
