# ane-worker: MIL text, weight blobs, surface layout, the emu backend
if(TARGET anedvd_ane)
  ad_test(NAME test-mil SOURCES test-mil.c LIBS anedvd_ane LABELS unit)
  ad_test(NAME test-blob SOURCES test-blob.c LIBS anedvd_ane LABELS unit)
  ad_test(NAME test-emu SOURCES test-emu.c LIBS anedvd_ane LABELS unit)
  # again with one int8 column on each kernel, whatever the CPU's verdict
  # (emu_i8_one_col_avx2): both paths against ref where the CPU has both
  foreach(k avx2 avx512)
    add_test(NAME test-emu-i8-col-${k} COMMAND test-emu)
    set_tests_properties(test-emu-i8-col-${k} PROPERTIES LABELS unit TIMEOUT 600 ENVIRONMENT "ANEDVD_I8_ONE_COL=${k}")
  endforeach()
  # and with one column's prefetch off and at its farthest, non-temporal
  # there whatever the CPU: the same bits
  add_test(NAME test-emu-prefetch-0 COMMAND test-emu)
  set_tests_properties(test-emu-prefetch-0 PROPERTIES LABELS unit TIMEOUT 600 ENVIRONMENT "ANEDVD_PREFETCH_AHEAD=0")
  add_test(NAME test-emu-prefetch-65536 COMMAND test-emu)
  set_tests_properties(test-emu-prefetch-65536 PROPERTIES LABELS unit TIMEOUT 600
    ENVIRONMENT "ANEDVD_PREFETCH_AHEAD=65536;ANEDVD_PREFETCH_NTA=1")
  add_executable(bench-emu bench-emu.c)
  target_link_libraries(bench-emu PRIVATE anedvd_ane)
  add_executable(bench-emu-i8 bench-emu-i8.c)
  target_link_libraries(bench-emu-i8 PRIVATE anedvd_ane)
  # the blob writer is the ane-worker's own (not in its include/): these
  # tests reach into it
  foreach(t test-blob test-emu bench-emu bench-emu-i8)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/ane-worker)
  endforeach()
endif()
if(TARGET anedvd_ane)
  ad_test(NAME test-kcache SOURCES test-kcache.c LIBS anedvd_ane LABELS unit)
endif()
