# anedvd-frontend: stop-sequence holdback and UTF-8 helpers (unit), raw HTTP
# against a live frontend + tokenizer + fake engine (integration), and the
# official OpenAI and Anthropic clients from npm against the same (e2e).
if(NOT TARGET anedvd_frontend)
  return()
endif()

ad_test(NAME test-fe-stop SOURCES test-fe-stop.c LIBS anedvd_frontend LABELS unit)
# tool calls: the markup scanner, fe_json_close, the grammars of each
# markup run by the grammar matcher (cpu-worker/include/grammar.h)
if(TARGET anedvd_cpu)
  ad_test(NAME test-fe-tools SOURCES test-fe-tools.c LIBS anedvd_frontend anedvd_cpu LABELS unit)
endif()
ad_test(NAME test-fe-think SOURCES test-fe-think.c LIBS anedvd_frontend LABELS unit)

# the request bodies of each dialect, fuzzed (fuzz/fuzz-http.c): one target
# per dialect, its corpus and past crashes replayed as fuzz-http-<d>-regress
include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz.cmake)
set(i 0)
foreach(d openai anthropic responses llama)
  ad_fuzz(NAME http-${d} SOURCES fuzz/fuzz-http.c CORPUS fuzz/corpus-http-${d} LIBS anedvd_frontend)
  foreach(t fuzz-http-${d}-replay fuzz-http-${d})
    if(TARGET ${t})
      target_compile_definitions(${t} PRIVATE FUZZ_DIALECT=${i})
      target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/frontend) # fe.h
    endif()
  endforeach()
  math(EXPR i "${i} + 1")
endforeach()

# the engine test double the HTTP tests run against (not a test itself)
add_executable(fake-engine fake-engine.c ${PROJECT_SOURCE_DIR}/cpu-worker/fit.c)
target_include_directories(fake-engine PRIVATE ${PROJECT_SOURCE_DIR}/cpu-worker)
target_link_libraries(fake-engine PRIVATE anedvd_tokenizer anedvd_rpc anedvd_proto anedvd_common)
set_target_properties(fake-engine PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)

find_program(NODE_EXE node)
find_program(NPM_EXE npm)
if(NOT NODE_EXE)
  message(STATUS "node not found: the HTTP and SDK tests of the frontend are not registered (apt install nodejs npm)")
  return()
endif()

set(FE_TEST_ENV
  "FE_BIN=$<TARGET_FILE:anedvd-frontend>"
  "TOK_BIN=$<TARGET_FILE:anedvd-tokenizer>"
  "FAKE_ENGINE_BIN=$<TARGET_FILE:fake-engine>"
  "FE_MODEL=${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K/stories260K.gguf")

add_test(NAME test-fe-http
  COMMAND ${NODE_EXE} --test ${CMAKE_CURRENT_SOURCE_DIR}/http/)
set_tests_properties(test-fe-http PROPERTIES LABELS integration TIMEOUT 300 ENVIRONMENT "${FE_TEST_ENV}")

if(NPM_EXE)
  # the SDKs come from npm at the versions package-lock.json pins
  add_test(NAME fe-npm-ci COMMAND ${NPM_EXE} ci --no-audit --no-fund --loglevel=error
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/node)
  set_tests_properties(fe-npm-ci PROPERTIES LABELS e2e TIMEOUT 600 FIXTURES_SETUP fe_node_modules)
  add_test(NAME test-fe-sdk
    COMMAND ${NODE_EXE} --test ${CMAKE_CURRENT_SOURCE_DIR}/node/)
  set(FE_SDK_ENV ${FE_TEST_ENV})
  if(TARGET anedvd-cpu-worker) # the real engine: the pipeline tests run too
    list(APPEND FE_SDK_ENV "CPU_WORKER_BIN=$<TARGET_FILE:anedvd-cpu-worker>")
  endif()
  set_tests_properties(test-fe-sdk PROPERTIES LABELS e2e TIMEOUT 300 ENVIRONMENT "${FE_SDK_ENV}"
                       FIXTURES_REQUIRED fe_node_modules)
else()
  message(STATUS "npm not found: the SDK tests of the frontend are not registered")
endif()

# these reach into the server's own headers (fe.h)
foreach(t test-fe-stop test-fe-tools test-fe-think)
  if(TARGET ${t})
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/frontend)
  endif()
endforeach()
