// Data types, shapes, device tensors (a typed view on a buffer) and host tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/cl.hpp"
#include "runtime/error.hpp"

namespace cldl {

// Storage types. The sub-byte ONNX types (i4, u4, f4e2m1, i2, u2) are stored one element per byte on the
// host and on devices (ONNX files pack them; the importer unpacks and the writer packs). Which ops compute
// on a type is each op's own list; the others reject it by name.
enum class DType : uint8_t {
  f32, f16, i32, i64, u8, boolean,
  i8, i16, u16, u32, u64, f64, bf16,
  f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f8e8m0,
  i4, u4, f4e2m1, i2, u2,
};
constexpr int kDTypeCount = int(DType::u2) + 1;
size_t dtype_size(DType t);
std::string_view to_string(DType t);
DType parse_dtype(std::string_view s);  // "f32", "float32", "f16", ...; throws on unknown

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<int16_t>() { return DType::i16; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }
template <> constexpr DType dtype_of<uint64_t>() { return DType::u64; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
// Elements per stored byte group in ONNX files: 2 for 4-bit types, 4 for 2-bit types, else 1.
int onnx_pack_factor(DType t);

// N-d shape (row-major). Dimensions are int64 as in ONNX.
struct Shape {
  std::vector<int64_t> dims;
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(std::vector<int64_t> d) : dims(std::move(d)) {}
  size_t rank() const { return dims.size(); }
  // Bounds-checked: an index past the rank throws naming the shape (a negative one arrives huge).
  int64_t operator[](size_t i) const {
    if (i >= dims.size()) index_error(i);
    return dims[i];
  }
  int64_t& operator[](size_t i) {
    if (i >= dims.size()) index_error(i);
    return dims[i];
  }
  int64_t numel() const;
  bool operator==(const Shape&) const = default;
  std::string str() const;  // "[2, 3, 4]"
  [[noreturn]] void index_error(size_t i) const;
};

// Host memory tensor: model inputs/outputs, initializers and test data. Copies share their bytes until one
// of them is written (copy on write: the non-const accessors copy shared bytes first), so a plan's copy of
// a model graph costs no weight copies, and storage_id() tells which tensors still hold the same bytes.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);
  template <typename T>
  static HostTensor from(Shape shape, std::span<const T> values) {
    HostTensor t(dtype_of<T>(), std::move(shape));
    if (values.size() != static_cast<size_t>(t.numel()))
      fail("HostTensor::from: {} values for shape {}", values.size(), t.shape().str());
    std::memcpy(t.data(), values.data(), t.bytes());
    return t;
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return bytes_ ? bytes_->size() : 0; }
  void* data() { return mutable_bytes(); }
  const void* data() const { return bytes_ ? bytes_->data() : nullptr; }
  template <typename T> T* as() { check_type<T>(); return reinterpret_cast<T*>(mutable_bytes()); }
  template <typename T> const T* as() const { check_type<T>(); return reinterpret_cast<const T*>(data()); }
  template <typename T> std::span<T> span() { return {as<T>(), static_cast<size_t>(numel())}; }
  template <typename T> std::span<const T> span() const { return {as<T>(), static_cast<size_t>(numel())}; }
  void reshape(Shape s);  // same element count
  // The bytes this tensor shares with its copies (null when empty): equal ids hold the same values.
  const void* storage_id() const { return bytes_.get(); }

 private:
  std::byte* mutable_bytes();  // copies the bytes first while another tensor shares them
  template <typename T> void check_type() const {
    if (dtype_of<T>() != dtype_ && !(dtype_ == DType::f16 && sizeof(T) == 2))
      fail("HostTensor: accessed {} data as another type", to_string(dtype_));
  }
  DType dtype_ = DType::f32;
  Shape shape_;
  std::shared_ptr<std::vector<std::byte>> bytes_;
};

// Device tensor: dtype + shape + a view (buffer, byte offset) on one device of a context.
// It does not own memory by itself; `keepalive` holds a pool block when the pool allocated it.
struct Tensor {
  cl::Buffer buffer;
  size_t offset_bytes = 0;
  Shape shape;
  DType dtype = DType::f32;
  int device = 0;  // index into the owning Context's devices
  std::shared_ptr<void> keepalive;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  size_t offset_elems() const { return offset_bytes / dtype_size(dtype); }
  bool valid() const { return buffer() != nullptr; }
  // Same storage, another shape (element counts must match).
  Tensor reshaped(Shape s) const;
  // A view `count` elements long starting `start` elements in, flattened.
  Tensor slice_elems(int64_t start, int64_t count, Shape s) const;
};

}  // namespace cldl
