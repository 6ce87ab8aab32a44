// Test glue for the CNN / tensor op suites: upload typed vectors, run an op, download the result.
#pragma once
#include <string>
#include <vector>

#include "layers/op.hpp"
#include "../support/test_util.hpp"

namespace cldl::test {

template <typename T>
Tensor up(const std::vector<T>& v, const Shape& s) {
  if constexpr (std::is_same_v<T, bool>) {
    HostTensor h(DType::boolean, s);
    for (size_t i = 0; i < v.size(); ++i) static_cast<uint8_t*>(h.data())[i] = v[i];
    return ctx().upload(h);
  } else {
    return ctx().upload(HostTensor::from<T>(s, std::span<const T>(v)));
  }
}

template <typename T>
std::vector<T> down(const Tensor& t) {
  HostTensor h = ctx().download(t);
  std::vector<T> v(h.numel());
  std::memcpy(v.data(), h.data(), h.bytes());
  return v;
}

// Runs op on inputs into a freshly allocated output of shape `out` and dtype `dt` (with a workspace when
// the op asks for one); waits.
inline Tensor run_op(Op& op, const std::vector<Tensor>& in, const Shape& out, DType dt = DType::f32) {
  Tensor y = ctx().alloc(out, dt);
  auto ec = ctx().exec();
  Tensor outs[1] = {y};
  Tensor ws;
  if (op.workspace_bytes()) ws = ctx().alloc(Shape{int64_t((op.workspace_bytes() + 3) / 4)}, DType::f32);
  op.enqueue(in, outs, ws.valid() ? &ws : nullptr, ec);
  ctx().finish();
  return y;
}

// Expects `fn` to throw an Error whose message holds every string in `parts`.
template <typename Fn>
void expect_invalid(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    FAIL("expected a validation error");
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) CHECK_MESSAGE(m.find(p) != std::string::npos, "'" << p << "' missing in: " << m);
  }
}

}  // namespace cldl::test
