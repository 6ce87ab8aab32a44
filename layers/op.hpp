// The contract every op follows: validate (static, on the op's config and input shapes) -> create ->
// workspace_bytes -> enqueue. Ops own no graph state and no tensors.
#pragma once
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/context.hpp"
#include "runtime/exec_context.hpp"
#include "runtime/tensor.hpp"

namespace cldl {

class Op {
 public:
  virtual ~Op() = default;
  // ONNX-style op name ("Conv", "Gemm", "LSTM").
  virtual std::string_view type() const = 0;
  // Which algorithm / provider `create` picked and why (also logged at debug level).
  virtual std::string algorithm() const { return "default"; }
  // Scratch bytes that enqueue needs; the caller passes a tensor at least this large.
  virtual size_t workspace_bytes() const { return 0; }
  // Asynchronous: waits for ec.wait_for, signals ec.signal. Outputs are views, written in place.
  virtual void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                       ExecutionContext& ec) = 0;

 protected:
  // clSetKernelArg on one cl_kernel is not thread-safe: ops set arguments and enqueue under this lock
  // so one op object may serve several threads (enqueue is asynchronous, so the lock is held briefly).
  std::mutex launch_mutex_;
};

// Validation failures name the op, the argument, the value and what was expected.
template <typename... Args>
[[noreturn]] void invalid(std::string_view op, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format("{}: {}", op, fmt::format(f, std::forward<Args>(args)...)), 0, std::string(op));
}

}  // namespace cldl
