# The CPU check every program makes first (common/cpu-level.h): the check
# with injected feature sets (test-cpu-level), and on the built programs
# (test-cpu-level.sh): no VEX/EVEX instruction in the check's object, the
# check the first constructor of each program, each refusing to start on a
# CPU without AVX2 (a test hook) and starting as before on this one.
ad_test(NAME test-cpu-level SOURCES test-cpu-level.c LIBS anedvd_cpu_level LABELS unit TIMEOUT 60)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND CMAKE_SYSTEM_NAME STREQUAL "Linux"
   AND TARGET anedvd)
  # samples the scan must find (built for it; linked into nothing)
  add_library(cpu-level-vex OBJECT cpu-level-vex.c)
  add_test(NAME test-cpu-level-programs
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-cpu-level.sh ${PROJECT_BINARY_DIR}/bin
                   "$<JOIN:$<TARGET_OBJECTS:anedvd_cpu_level>, >" "$<JOIN:$<TARGET_OBJECTS:cpu-level-vex>, >")
  set_tests_properties(test-cpu-level-programs PROPERTIES LABELS integration TIMEOUT 120)
endif()
