/* Tiny check macros for the C API tests (plain C99). */
#ifndef CLDL_TESTS_CAPI_UTIL_H
#define CLDL_TESTS_CAPI_UTIL_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cldl.h"

static int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

/* A call that must succeed; on failure prints cldl's message and stops the test. */
#define OK(call)                                                                                                     \
  do {                                                                                                               \
    cldl_status st_ = (call);                                                                                        \
    if (st_ != CLDL_OK) {                                                                                            \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, cldl_status_name(st_), cldl_last_error()); \
      exit(1);                                                                                                       \
    }                                                                                                                \
  } while (0)

/* A call that must fail with `want` and leave a message containing `needle`. */
#define FAILS(call, want, needle)                                                                                \
  do {                                                                                                           \
    cldl_status st_ = (call);                                                                                    \
    if (st_ != (want) || !strstr(cldl_last_error(), (needle))) {                                                 \
      fprintf(stderr, "%s:%d: %s -> %s (want %s), message '%s' (want it to contain '%s')\n", __FILE__, __LINE__, \
              #call, cldl_status_name(st_), cldl_status_name(want), cldl_last_error(), (needle));                \
      ++g_failures;                                                                                              \
    }                                                                                                            \
  } while (0)

static int close_all(const float* got, const float* want, size_t n, float tol) {
  size_t i;
  for (i = 0; i < n; ++i)
    if (fabsf(got[i] - want[i]) > tol * (1.f + fabsf(want[i]))) {
      fprintf(stderr, "mismatch at %zu: got %g, want %g\n", i, (double)got[i], (double)want[i]);
      return 0;
    }
  return 1;
}

#endif
