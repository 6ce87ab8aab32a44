// Private to models/*.cpp: the ONNX protobuf classes as Debian's libonnx builds them (ONNX_ML on,
// namespace onnx), defined here so the library's CMake target needs no extra definitions.
#pragma once
#ifndef ONNX_NAMESPACE
#define ONNX_NAMESPACE onnx
#endif
#ifndef ONNX_ML
#define ONNX_ML 1
#endif
#include <onnx/onnx_pb.h>
