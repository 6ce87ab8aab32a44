// clFFT set-up shared by Conv (fft), DFT and STFT (layers/clfft_util.hpp).
#include "layers/clfft_util.hpp"

#include <cstdlib>
#include <mutex>

#include "runtime/error.hpp"

namespace cldl {

void check_clfft(clfftStatus s, const char* op, const char* call) {
  if (s != CLFFT_SUCCESS) throw Error(fmt::format("{}: {} failed with status {}", op, call, int(s)), int(s), call);
}

namespace {
bool& torn_down() {
  static bool done = false;
  return done;
}
}  // namespace

bool clfft_torn_down() { return torn_down(); }

void clfft_setup_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    clfftSetupData d;
    check_clfft(clfftInitSetupData(&d), "clFFT", "clfftInitSetupData");
    check_clfft(clfftSetup(&d), "clFFT", "clfftSetup");
    // Registered after every earlier static (the OpenCL context of a process-wide Context included), so
    // it runs before their destructors. Plans of ops still alive at exit are left to the teardown.
    std::atexit([] {
      torn_down() = true;
      clfftTeardown();
    });
  });
}

cl::Buffer clfft_region(cl::Buffer b, size_t origin, size_t size, const char* what) {
  cl_buffer_region r{origin, size};
  cl_int err = CL_SUCCESS;
  cl::Buffer s = b.createSubBuffer(CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
  check(err, "clCreateSubBuffer", what);
  return s;
}

}  // namespace cldl
