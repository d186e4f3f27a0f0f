# The pipeline's decode loop: attention over the fp16 cache, the exact
# kernel backend, and the engine against the reference on every fixture.
ad_test(NAME test-attention SOURCES test-attention.c LIBS anedvd_cpu LABELS unit)
# the same with the fast path capped at AVX2 (ANEDVD_SIMD), so that a CPU
# with AVX-512 runs both
add_test(NAME test-attention-avx2 COMMAND test-attention)
set_tests_properties(test-attention-avx2 PROPERTIES LABELS unit TIMEOUT 600 ENVIRONMENT "ANEDVD_SIMD=avx2")
ad_test(NAME test-engine SOURCES test-engine.c LIBS anedvd_kblocal LABELS integration)

# a benchmark prints figures; it is built but not run by ctest
add_executable(bench-attention bench-attention.c)
target_link_libraries(bench-attention PRIVATE anedvd_cpu anedvd_common)
target_include_directories(bench-attention PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
add_executable(bench-engine bench-engine.c)
target_link_libraries(bench-engine PRIVATE anedvd_kblocal anedvd_common)
target_include_directories(bench-engine PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# the prefix cache: alone, exact after a hit on every architecture, and
# through the scheduler
ad_test(NAME test-pcache SOURCES test-pcache.c LIBS anedvd_cpu LABELS integration)
add_executable(bench-pcache bench-pcache.c)
target_link_libraries(bench-pcache PRIVATE anedvd_kblocal anedvd_common)
target_include_directories(bench-pcache PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
# speculative decoding: drafts, their length and cost, and exactness through
# the scheduler on every fixture model
ad_test(NAME test-spec SOURCES test-spec.c LIBS anedvd_kblocal LABELS integration TIMEOUT 600)
