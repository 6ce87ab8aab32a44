/* Runs an ONNX model with cldl's C API: cldl_example model.onnx (tests: the fixture's mlp.onnx). */
#include <cldl.h>
#include <stdio.h>

int main(int argc, char** argv) {
  cldl_context ctx; cldl_model model; cldl_session s;
  float x[5] = {1, -2, 3, -4, 5}, y[7];
  int64_t dims[2] = {1, 5};  /* "batch" is symbolic in the model: any value runs */
  if (argc < 2 || cldl_context_create(NULL, &ctx) || cldl_model_load(ctx, argv[1], NULL, &model) ||
      cldl_session_create(model, &s) || cldl_session_set_input(s, "x", CLDL_F32, dims, 2, x, sizeof x) ||
      cldl_session_run(s) || cldl_session_get_output(s, "y", y, sizeof y)) {
    fprintf(stderr, "error: %s\n", cldl_last_error());
    return 1;
  }
  for (int i = 0; i < 7; ++i) printf("%g ", y[i]);
  printf("\n");
  cldl_session_release(s); cldl_model_release(model); cldl_context_release(ctx);
  return 0;
}
