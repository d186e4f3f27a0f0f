# The side-by-side benchmark (tests/perf/bench.sh) and what it needs: the
# streaming-read baseline, and a smoke test that runs the script in QUICK mode
# on stories260K so its output cannot rot. The smoke test checks the shape of
# the output (every line, every figure a number), never the figures themselves.
add_executable(bench-stream bench-stream.c)
target_link_libraries(bench-stream PRIVATE anedvd_common anedvd_cpu_level)

if(TARGET anedvd)
  add_test(NAME bench-smoke COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/perf/test-bench.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(bench-smoke PROPERTIES LABELS "bench-smoke;e2e" TIMEOUT 120)
endif()
