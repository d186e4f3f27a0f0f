# The tree is formatted: tests/format.sh check (clang-format against
# .clang-format; `make format` applies it). deploy/install-deps.sh --test
# installs clang-format; without it the test is not registered.
find_program(AD_CLANG_FORMAT NAMES clang-format-14 clang-format)
if(AD_CLANG_FORMAT)
  add_test(NAME test-format COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/format.sh check)
  set_tests_properties(test-format PROPERTIES LABELS unit ENVIRONMENT "CLANG_FORMAT=${AD_CLANG_FORMAT}")
else()
  message(STATUS "clang-format not found: test-format is not registered (apt install clang-format)")
endif()
