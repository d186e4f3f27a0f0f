# The anedvd CLI: the supervisor with stand-in children, the model
# generator, and the commands end to end over the real processes.
if(TARGET anedvd)
  ad_test(NAME test-supervisor SOURCES test-supervisor.c ${PROJECT_SOURCE_DIR}/cli/supervisor.c
          LIBS anedvd_toksvc anedvd_proto LABELS integration TIMEOUT 120)
  target_include_directories(test-supervisor PRIVATE ${PROJECT_SOURCE_DIR}/cli)

  add_executable(gen-model gen-model.c ${PROJECT_SOURCE_DIR}/cli/cmd-genmodel.c)
  target_include_directories(gen-model PRIVATE ${PROJECT_SOURCE_DIR}/cli)
  target_link_libraries(gen-model PRIVATE anedvd_common)

  add_test(NAME test-cli COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-cli.sh ${PROJECT_BINARY_DIR}/bin
           ${CMAKE_CURRENT_SOURCE_DIR}/data $<TARGET_FILE:gen-model>)
  set_tests_properties(test-cli PROPERTIES LABELS "e2e" TIMEOUT 900)
  add_test(NAME test-weights COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-weights.sh ${PROJECT_BINARY_DIR}/bin
           $<TARGET_FILE:gen-model>)
  set_tests_properties(test-weights PROPERTIES LABELS "e2e" TIMEOUT 300)
endif()
