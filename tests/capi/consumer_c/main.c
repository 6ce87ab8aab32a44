/* Uses the installed C API: loads a model, runs it, prints the version. Usage: c_consumer MODEL */
#include <cldl/cldl.h>
#include <stdio.h>

int main(int argc, char** argv) {
  cldl_context ctx;
  cldl_model model;
  size_t n = 0;
  const char* names[1] = {"batch"};
  int64_t values[1] = {2};
  cldl_load_options o;
  if (argc != 2) return 2;
  cldl_load_options_init(&o);
  o.dim_count = 1;
  o.dim_names = names;
  o.dim_values = values;
  if (cldl_context_create(NULL, &ctx) || cldl_model_load(ctx, argv[1], &o, &model) ||
      cldl_model_input_count(model, &n) || n != 1) {
    fprintf(stderr, "c consumer: %s\n", cldl_last_error());
    return 1;
  }
  cldl_model_release(model);
  cldl_context_release(ctx);
  printf("c consumer ok with cldl %s\n", cldl_version());
  return 0;
}
