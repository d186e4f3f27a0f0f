# The shared-memory data plane between kb_remote and the ane-worker
ad_test(NAME test-dataplane SOURCES test-dataplane.c LABELS unit TIMEOUT 120)
# the round trip of a call, data plane against nng (a benchmark, not a test)
if(TARGET anedvd-ane-worker AND TARGET anedvd_proto)
  add_executable(bench-dataplane bench-dataplane.c)
  target_link_libraries(bench-dataplane PRIVATE anedvd_cpu anedvd_proto anedvd_common)
  target_include_directories(bench-dataplane PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(bench-dataplane PRIVATE T_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data"
                             ANE_WORKER_BIN="$<TARGET_FILE:anedvd-ane-worker>")
  add_dependencies(bench-dataplane anedvd-ane-worker)
endif()
ad_test(NAME test-cpuload SOURCES test-cpuload.c LABELS unit TIMEOUT 60)
