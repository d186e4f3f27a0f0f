# The chaos test (tests/chaos/chaos.test.mjs): `anedvd serve --parallel 4` on
# stories260K with 8 streaming clients while the workers are SIGKILLed at
# random moments (20 kills); every request must complete with exactly its
# reply without kills. Then a SIGKILLed frontend on a tcp:// engine, whose
# job the lease ends. Node alone (no npm packages); a few minutes.
if(NOT TARGET anedvd OR NOT TARGET anedvd-frontend OR NOT TARGET anedvd-cpu-worker)
  return()
endif()
find_program(NODE_EXE node)
if(NOT NODE_EXE)
  message(STATUS "node not found: the chaos test is not registered")
  return()
endif()
add_test(NAME test-chaos
  COMMAND ${NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/chaos/chaos.test.mjs)
# alone: it starts a whole server twice and kills its processes
set_tests_properties(test-chaos PROPERTIES LABELS e2e TIMEOUT 900 RUN_SERIAL TRUE
  ENVIRONMENT "ANEDVD_BIN=$<TARGET_FILE:anedvd>;FE_MODEL=${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K/stories260K.gguf")
