# ctest fuzz_onnx: configures and builds the fuzz build (the library compiled by clang with
# -fsanitize=fuzzer-no-link,address) in BUILD_DIR, then runs the ONNX-loader fuzz target for SECONDS
# from the seed corpus (the small .onnx files under tests/data/patterns, the kept crash inputs under
# tests/fuzz/regressions and, when ../shared is there, the ONNX conformance models). A crash, sanitizer report, leak or out-of-memory fails the test; the input
# is left as BUILD_DIR/crash-* (copy it into tests/fuzz/regressions/ once fixed).
# cmake -DSOURCE_DIR=.. -DBUILD_DIR=.. -DCXX=clang++ -DSECONDS=60 [-DLAUNCHER=ccache] -P run.cmake
set(args -S ${SOURCE_DIR} -B ${BUILD_DIR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Fuzz
         -DCLDL_FUZZ_BUILD=ON -DCLDL_BUILD_TESTS=OFF -DCLDL_BUILD_TOOLS=OFF -DCLDL_BUILD_EXAMPLES=OFF -DCLDL_BUILD_PYTHON=OFF)
if(LAUNCHER)
  list(APPEND args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} ${args} OUTPUT_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz build: cmake configure failed (${rc})")
endif()
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target cldl_fuzz_onnx -j ${cores} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz build: building cldl_fuzz_onnx failed (${rc})")
endif()

file(REMOVE_RECURSE ${BUILD_DIR}/seeds)
file(GLOB seeds ${SOURCE_DIR}/tests/data/patterns/*.onnx ${SOURCE_DIR}/tests/fuzz/regressions/*)
file(COPY ${seeds} DESTINATION ${BUILD_DIR}/seeds)
# The ONNX conformance models (../shared, when present) widen the op coverage of the seeds.
file(GLOB conformance ${SOURCE_DIR}/../shared/conformance/onnx-node/*/model.onnx)
foreach(m ${conformance})
  get_filename_component(dir ${m} DIRECTORY)
  get_filename_component(name ${dir} NAME)
  file(COPY_FILE ${m} ${BUILD_DIR}/seeds/${name}.onnx)
endforeach()
file(MAKE_DIRECTORY ${BUILD_DIR}/corpus)
execute_process(
  COMMAND ${BUILD_DIR}/tests/fuzz/cldl_fuzz_onnx ${BUILD_DIR}/corpus ${BUILD_DIR}/seeds -max_total_time=${SECONDS}
          -rss_limit_mb=2560 -malloc_limit_mb=2048 -timeout=20 -max_len=65536 -print_final_stats=1
          -artifact_prefix=${BUILD_DIR}/
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz_onnx: the fuzzer found a failing input (exit ${rc}); see ${BUILD_DIR}/crash-* / oom-* / timeout-*")
endif()
