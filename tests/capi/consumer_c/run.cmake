# Installs cldl into a temporary prefix, then configures, builds and runs a C app that uses
# find_package(cldl) and <cldl/cldl.h> from a folder outside the source tree.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
file(COPY ${SOURCE_DIR}/tests/capi/consumer_c/ DESTINATION ${WORK_DIR}/app)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK_DIR}/app -B ${WORK_DIR}/app-build
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the C consumer app failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/app-build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the C consumer app failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/app-build/c_consumer ${MODEL} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message(STATUS "C consumer output: ${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "c consumer ok")
  message(FATAL_ERROR "the C consumer app failed: ${rc}")
endif()
