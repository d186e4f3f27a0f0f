# The token sampler: fast pipeline against its reference twin, penalties,
# seeds, the drawn distribution, parameter checks.
ad_test(NAME test-sample SOURCES test-sample.c LIBS anedvd_cpu LABELS unit)

# a benchmark prints figures; it is built but not run by ctest
add_executable(bench-sample bench-sample.c)
target_link_libraries(bench-sample PRIVATE anedvd_cpu anedvd_common)
target_include_directories(bench-sample PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
