// ONNX auto_pad, shared by convolution and pooling.
#pragma once

namespace cldl {
enum class AutoPad { notset, same_upper, same_lower, valid };
}  // namespace cldl
