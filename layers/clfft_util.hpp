// clFFT set-up shared by the ops that transform through it (Conv's FFT algorithm, DFT, STFT): the one
// process-wide clfftSetup, its teardown at exit, status checks that name the op, and the sub-buffers that
// hand workspace regions to clFFT (it takes whole cl_mem objects, no offsets).
#pragma once
#include <clFFT.h>

#include "runtime/cl.hpp"

namespace cldl {

// Throws Error naming `op` and the clFFT call when `s` is not CLFFT_SUCCESS.
void check_clfft(clfftStatus s, const char* op, const char* call);
// clfftSetup once per process; clfftTeardown registered at exit.
void clfft_setup_once();
// True once clFFT is torn down (at exit): plans still alive then must not be destroyed.
bool clfft_torn_down();
// Workspace regions for clFFT start on this boundary: a sub-buffer's origin must meet
// CL_DEVICE_MEM_BASE_ADDR_ALIGN (at most 4 KiB on known devices).
constexpr size_t kClfftAlign = 4096;
// A sub-buffer of `b` at `origin` (a multiple of kClfftAlign); errors name `what`.
cl::Buffer clfft_region(cl::Buffer b, size_t origin, size_t size, const char* what);

}  // namespace cldl
