# The whole system as a user starts it (`anedvd serve` on stories260K):
# the official OpenAI and Anthropic clients from npm (tests/node/live.test.mjs)
# and the WebUI in Debian's chromium (tests/web/live-run.sh), both against
# the live server. Screenshots land in <build>/tests/web-artifacts (live-*.png).
if(NOT TARGET anedvd OR NOT TARGET anedvd-frontend OR NOT TARGET anedvd-cpu-worker)
  return()
endif()
find_program(NODE_EXE node)
find_program(NPM_EXE npm)
if(NOT NODE_EXE OR NOT NPM_EXE)
  message(STATUS "node/npm not found: the live e2e tests are not registered")
  return()
endif()

set(LIVE_MODEL ${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K/stories260K.gguf)

# fe-npm-ci (tests/frontend.cmake) installs the SDKs
add_test(NAME test-live-sdk
  COMMAND ${NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/node/live.test.mjs)
set_tests_properties(test-live-sdk PROPERTIES LABELS e2e TIMEOUT 300
  ENVIRONMENT "ANEDVD_BIN=$<TARGET_FILE:anedvd>;FE_MODEL=${LIVE_MODEL}"
  FIXTURES_REQUIRED fe_node_modules)

# run.sh installs playwright-core itself; test-web's npm ci must not race it
add_test(NAME test-web-live
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/web/live-run.sh $<TARGET_FILE:anedvd> ${LIVE_MODEL})
set_tests_properties(test-web-live PROPERTIES LABELS e2e TIMEOUT 600 RUN_SERIAL TRUE
  ENVIRONMENT "ANEDVD_WEB_ARTIFACTS=${CMAKE_CURRENT_BINARY_DIR}/web-artifacts")

# a prompt longer than the context: `serve` and `run` fit it by the
# cpu-worker's one rule (cpu-worker/fit.h)
add_test(NAME test-live-fit
  COMMAND ${NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/node/fit.test.mjs)
set_tests_properties(test-live-fit PROPERTIES LABELS e2e TIMEOUT 300
  ENVIRONMENT "ANEDVD_BIN=$<TARGET_FILE:anedvd>;FE_MODEL=${LIVE_MODEL}"
  FIXTURES_REQUIRED fe_node_modules)

# tool calls and structured output through the official clients, judged by ajv
add_test(NAME test-live-tools
  COMMAND ${NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/node/tools.test.mjs)
set(LIVE_TOOLS_ENV "ANEDVD_BIN=$<TARGET_FILE:anedvd>;FE_MODEL=${LIVE_MODEL}")
if(TARGET gen-model) # and the markup of a model's own template
  list(APPEND LIVE_TOOLS_ENV "GEN_MODEL=$<TARGET_FILE:gen-model>" "JINJA_DATA=${CMAKE_CURRENT_SOURCE_DIR}/data/jinja")
endif()
set_tests_properties(test-live-tools PROPERTIES LABELS e2e TIMEOUT 300
  ENVIRONMENT "${LIVE_TOOLS_ENV}" FIXTURES_REQUIRED fe_node_modules)
# a thinking model (gen-model's scripted fixture with Qwen3's template)
# through the SDKs: reasoning_content, thinking blocks, the no-think switches,
# tools and tool history rendered as jinja2 renders them, bad input
if(TARGET gen-model)
  add_test(NAME test-live-think
    COMMAND ${NODE_EXE} --test --test-reporter=spec ${CMAKE_CURRENT_SOURCE_DIR}/node/think.test.mjs)
  set_tests_properties(test-live-think PROPERTIES LABELS e2e TIMEOUT 300
    ENVIRONMENT "ANEDVD_BIN=$<TARGET_FILE:anedvd>;GEN_MODEL=$<TARGET_FILE:gen-model>;JINJA_DATA=${CMAKE_CURRENT_SOURCE_DIR}/data/jinja"
    FIXTURES_REQUIRED fe_node_modules)
endif()
