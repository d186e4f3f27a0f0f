# ane-worker: MIL text, weight blobs, surface layout, the emu backend
if(TARGET anedvd_ane)
  ad_test(NAME test-mil SOURCES test-mil.c LIBS anedvd_ane LABELS unit)
  ad_test(NAME test-blob SOURCES test-blob.c LIBS anedvd_ane LABELS unit)
  ad_test(NAME test-emu SOURCES test-emu.c LIBS anedvd_ane LABELS unit)
  add_executable(bench-emu bench-emu.c)
  target_link_libraries(bench-emu PRIVATE anedvd_ane)
endif()
