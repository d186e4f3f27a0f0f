# The cpu-worker service: scheduler, engine.proto handler and typed client,
# in process and through the anedvd-cpu-worker binary (and, when it is
# built, on an anedvd-ane-worker through kb_remote).
if(TARGET anedvd-cpu-worker AND TARGET anedvd_proto)
  ad_test(NAME test-worker SOURCES test-worker.c LIBS anedvd_kblocal anedvd_vocablocal anedvd_proto LABELS integration)
  target_compile_definitions(test-worker PRIVATE CPU_WORKER_BIN="$<TARGET_FILE:anedvd-cpu-worker>")
  add_dependencies(test-worker anedvd-cpu-worker)
  if(TARGET anedvd-ane-worker)
    target_compile_definitions(test-worker PRIVATE ANE_WORKER_BIN="$<TARGET_FILE:anedvd-ane-worker>")
    add_dependencies(test-worker anedvd-ane-worker)
  endif()
endif()
# the one rule of context fitting (cpu-worker/fit.h), a pure function
ad_test(NAME test-fit SOURCES test-fit.c ${PROJECT_SOURCE_DIR}/cpu-worker/fit.c LABELS unit)
target_include_directories(test-fit PRIVATE ${PROJECT_SOURCE_DIR}/cpu-worker)
