# ane-worker: MIL text, weight blobs, surface layout, the emu backend
if(TARGET anedvd_ane)
  ad_test(NAME test-mil SOURCES test-mil.c LIBS anedvd_ane LABELS unit)
  ad_test(NAME test-blob SOURCES test-blob.c LIBS anedvd_ane LABELS unit)
  ad_test(NAME test-emu SOURCES test-emu.c LIBS anedvd_ane LABELS unit)
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
