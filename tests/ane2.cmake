# The kernel plan, kb_local / kb_remote and the anedvd-ane-worker process.
if(TARGET anedvd_cpu AND TARGET anedvd-ane-worker)
  ad_test(NAME test-ane-worker SOURCES test-ane-worker.c LIBS anedvd_kblocal anedvd_cpu anedvd_ane anedvd_proto
          LABELS integration)
  target_compile_definitions(test-ane-worker PRIVATE WORKER_BIN="$<TARGET_FILE:anedvd-ane-worker>")
  add_dependencies(test-ane-worker anedvd-ane-worker)
endif()
