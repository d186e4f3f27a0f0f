# The model loader and the fp32 reference engine.
ad_test(NAME test-model SOURCES test-model.c LIBS anedvd_cli LABELS unit)
if(TARGET anedvd_tokenizer)
  target_compile_definitions(test-model PRIVATE AD_HAVE_TOKENIZER=1)
endif()
ad_test(NAME test-ref SOURCES test-ref.c LIBS anedvd_cpu LABELS integration)

# a benchmark prints figures; it is built but not run by ctest
add_executable(bench-ref bench-ref.c)
target_link_libraries(bench-ref PRIVATE anedvd_cpu anedvd_common)
target_include_directories(bench-ref PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
