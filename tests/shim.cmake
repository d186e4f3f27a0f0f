# The ane backend off macOS: the shim's device-free helpers, a syntax-only
# compile of the shim (Objective-C, against shim/stand-in/) and of the
# ANEDVD_ANE paths of the ane-worker, and `--backend ane` refused with exit 2
# on a build without it. The deployment is tested in deploy.cmake.
if(TARGET anedvd_ane)
  ad_test(NAME test-shim SOURCES test-shim.c ${PROJECT_SOURCE_DIR}/shim/ane-shim-util.c
          LIBS anedvd_ane LABELS unit)
  target_include_directories(test-shim PRIVATE ${PROJECT_SOURCE_DIR}/shim)
endif()

if(NOT ANEDVD_ANE)
  find_program(AD_CLANG NAMES clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14)
  if(NOT AD_CLANG)
    message(WARNING "clang not found: test-shim-syntax cannot check shim/ane-shim.m and will FAIL; "
                    "install clang (deploy/install-deps.sh --test installs it)")
    set(AD_CLANG "")
  endif()
  add_test(NAME test-shim-syntax COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-shim.sh syntax
           ${PROJECT_SOURCE_DIR} "${AD_CLANG}" ${PROJECT_BINARY_DIR}/proto/gen)
  set_tests_properties(test-shim-syntax PROPERTIES LABELS unit TIMEOUT 120)
  if(TARGET anedvd-ane-worker)
    add_test(NAME test-shim-worker COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-shim.sh worker
             $<TARGET_FILE:anedvd-ane-worker>)
    set_tests_properties(test-shim-worker PROPERTIES LABELS unit TIMEOUT 60)
  endif()
endif()
