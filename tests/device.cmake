# The device script (tests/device/run.sh): every command on a Mac's Neural
# Engine, stories260K and ANEDVD_DEVICE_MODEL when set, one summary table.
# Off macOS on Apple Silicon (or without -DANEDVD_ANE=ON) it exits 77 and
# ctest shows it as skipped: `ctest -L device`.
if(TARGET anedvd)
  add_test(NAME device COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/device/run.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(device PROPERTIES LABELS "device" TIMEOUT 3600 SKIP_RETURN_CODE 77)

  # the same steps on emu, anywhere, so the script itself cannot rot: every
  # row of stories260K there, none failed
  add_test(NAME device-script COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/device/run.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(device-script PROPERTIES LABELS "e2e" TIMEOUT 300
    ENVIRONMENT "DEVICE_ANY_HOST=1;BACKEND=emu;NGEN=16;LOGDIR=${CMAKE_CURRENT_BINARY_DIR}/device-script-log"
    PASS_REGULAR_EXPRESSION "\\| run stories260K.gguf [^|]*\\[emu\\] \\| ok \\| decode [0-9.]+ tok/s, prefill-64 [0-9.]+ tok/s"
    FAIL_REGULAR_EXPRESSION "\\| (FAIL|MISMATCH|exit )")
endif()
