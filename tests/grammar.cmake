# Constrained decoding: the GBNF compiler, the grammar matcher (the trie mask
# against its plain brute-force twin over real vocabularies, Qwen3's
# included), lazy triggers, sampling under a grammar; a benchmark.
if(NOT TARGET anedvd_tokenizer)
  return()
endif()
# tests/tokenizer.cmake unpacks the Qwen3 tokenizer.json (target tokdata)
set(AD_GRAMMAR_TOKDATA ${CMAKE_CURRENT_BINARY_DIR}/tokdata)
ad_test(NAME test-grammar SOURCES test-grammar.c LIBS anedvd_cpu anedvd_tokenizer anedvd_vocablocal LABELS unit)
target_compile_definitions(test-grammar PRIVATE T_TOKDATA="${AD_GRAMMAR_TOKDATA}")
add_dependencies(test-grammar tokdata)

# a benchmark prints figures; it is built but not run by ctest
add_executable(bench-grammar bench-grammar.c)
target_link_libraries(bench-grammar PRIVATE anedvd_cpu anedvd_tokenizer anedvd_vocablocal anedvd_common)
target_compile_definitions(bench-grammar PRIVATE T_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data"
                           T_TOKDATA="${AD_GRAMMAR_TOKDATA}")
add_dependencies(bench-grammar tokdata)

# the JSON Schema compiler: what each schema's grammar accepts and refuses
ad_test(NAME test-jschema SOURCES test-jschema.c LIBS anedvd_cpu LABELS unit)

# random texts of schema grammars, validated by ajv from npm (tests/node)
add_executable(jschema-sample jschema-sample.c)
target_link_libraries(jschema-sample PRIVATE anedvd_cpu anedvd_common)
find_program(NODE_EXE node)
if(NODE_EXE)
  add_test(NAME test-jschema-ajv
    COMMAND ${NODE_EXE} --test ${CMAKE_CURRENT_SOURCE_DIR}/node/jschema.test.mjs)
  set_tests_properties(test-jschema-ajv PROPERTIES LABELS e2e TIMEOUT 300
    ENVIRONMENT "JSCHEMA_SAMPLE_BIN=$<TARGET_FILE:jschema-sample>" FIXTURES_REQUIRED fe_node_modules)
endif()

# fuzz targets (tests/fuzz.cmake): the GBNF compiler and matcher, the schema compiler
if(COMMAND ad_fuzz)
  ad_fuzz(NAME gbnf SOURCES fuzz/fuzz-gbnf.c CORPUS fuzz/corpus-gbnf LIBS anedvd_cpu)
  ad_fuzz(NAME jschema SOURCES fuzz/fuzz-jschema.c CORPUS fuzz/corpus-jschema LIBS anedvd_cpu)
endif()
