// cldl's one exception type and the helpers that turn OpenCL status codes into it.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace cldl {

// Every failure in cldl is an Error. `cl_code` is the OpenCL status (0 when the error is not from
// OpenCL); `call` is the OpenCL function or cldl operation that failed. what() is one readable line
// (plus a build log where there is one).
class Error : public std::runtime_error {
 public:
  Error(std::string message, int cl_code = 0, std::string call = {})
      : std::runtime_error(std::move(message)), cl_code_(cl_code), call_(std::move(call)) {}
  int cl_code() const noexcept { return cl_code_; }
  const std::string& call() const noexcept { return call_; }

 private:
  int cl_code_;
  std::string call_;
};

// Name of an OpenCL status code, e.g. "CL_OUT_OF_RESOURCES".
std::string_view cl_error_name(int code) noexcept;

// Throws Error naming the call, the OpenCL error and `context` when code != CL_SUCCESS.
void throw_cl_error(int code, std::string_view call, std::string_view context);
inline void check(int code, std::string_view call, std::string_view context = {}) {
  if (code != 0) throw_cl_error(code, call, context);
}

// Throws Error with a formatted message (validation failures, bad specs, bad files).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace cldl
