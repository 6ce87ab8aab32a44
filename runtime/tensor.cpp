// DType helpers, Shape and HostTensor.
#include "runtime/tensor.hpp"

#include <fmt/ranges.h>

namespace cldl {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "u8" || s == "uint8") return DType::u8;
  if (s == "bool" || s == "boolean") return DType::boolean;
  fail("unknown dtype '{}' (expected f32, f16, i32, i64, u8 or bool)", s);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims, ", ")); }

void Shape::index_error(size_t i) const {
  fail("Shape {}: dimension index {} is out of range (rank {})", str(), int64_t(i), dims.size());
}

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (auto d : shape_.dims)
    if (d < 0) fail("HostTensor: negative dimension in shape {}", shape_.str());
  bytes_.resize(static_cast<size_t>(shape_.numel()) * dtype_size(dtype));
}

void HostTensor::reshape(Shape s) {
  if (s.numel() != shape_.numel()) fail("HostTensor::reshape: {} to {} changes the element count", shape_.str(), s.str());
  shape_ = std::move(s);
}

Tensor Tensor::reshaped(Shape s) const {
  if (s.numel() != numel()) fail("Tensor::reshaped: {} to {} changes the element count", shape.str(), s.str());
  Tensor t = *this;
  t.shape = std::move(s);
  return t;
}

Tensor Tensor::slice_elems(int64_t start, int64_t count, Shape s) const {
  if (start < 0 || count < 0 || start + count > numel() || s.numel() != count)
    fail("Tensor::slice_elems: [{}, {}) with shape {} out of {}", start, start + count, s.str(), shape.str());
  Tensor t = *this;
  t.offset_bytes += static_cast<size_t>(start) * dtype_size(dtype);
  t.shape = std::move(s);
  return t;
}

}  // namespace cldl
