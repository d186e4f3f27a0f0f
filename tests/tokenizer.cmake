# tokenizer: SentencePiece and byte-level BPE against llama.cpp's vectors,
# round trips, streaming, chat templates, error paths; a fuzz target; a
# benchmark.
if(NOT TARGET anedvd_tokenizer)
  return()
endif()

# The Hugging Face tokenizer.json files are stored xz-compressed; unpack them
# (with their tokenizer_config.json) into model-like directories.
find_program(XZ xz)
set(AD_TOKDATA ${CMAKE_CURRENT_BINARY_DIR}/tokdata)
set(AD_TOKDATA_FILES)
if(XZ)
  foreach(m qwen3 llama3)
    set(src ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer)
    set(dst ${AD_TOKDATA}/${m})
    add_custom_command(
      OUTPUT ${dst}/tokenizer.json ${dst}/tokenizer_config.json
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dst}
      COMMAND ${XZ} -dc ${src}/${m}-tokenizer.json.xz > ${dst}/tokenizer.json
      COMMAND ${CMAKE_COMMAND} -E copy ${src}/${m}-tokenizer_config.json ${dst}/tokenizer_config.json
      DEPENDS ${src}/${m}-tokenizer.json.xz ${src}/${m}-tokenizer_config.json
      COMMENT "unpacking the ${m} tokenizer.json")
    list(APPEND AD_TOKDATA_FILES ${dst}/tokenizer.json ${dst}/tokenizer_config.json)
  endforeach()
  # the Unigram tokenizer.json made from the llama-spm vocabulary (ugm-json.py)
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer)
  add_custom_command(
    OUTPUT ${AD_TOKDATA}/ugm-llama/tokenizer.json
    COMMAND ${CMAKE_COMMAND} -E make_directory ${AD_TOKDATA}/ugm-llama
    COMMAND ${XZ} -dc ${src}/ugm-llama-tokenizer.json.xz > ${AD_TOKDATA}/ugm-llama/tokenizer.json
    DEPENDS ${src}/ugm-llama-tokenizer.json.xz
    COMMENT "unpacking the ugm-llama tokenizer.json")
  list(APPEND AD_TOKDATA_FILES ${AD_TOKDATA}/ugm-llama/tokenizer.json)
else()
  message(WARNING "xz not found: the qwen3/llama3 tokenizer tests will report the files as missing")
endif()
add_custom_target(tokdata DEPENDS ${AD_TOKDATA_FILES})

ad_test(NAME test-tokenizer SOURCES test-tokenizer.c LIBS anedvd_cli LABELS unit)
target_compile_definitions(test-tokenizer PRIVATE T_TOKDATA="${AD_TOKDATA}")
target_compile_options(test-tokenizer PRIVATE -Wno-format-zero-length) # CHECK without a message
add_dependencies(test-tokenizer tokdata)

add_executable(bench-tokenizer bench-tokenizer.c)
target_link_libraries(bench-tokenizer PRIVATE anedvd_tokenizer anedvd_common)
target_compile_definitions(bench-tokenizer PRIVATE T_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data"
                           T_TOKDATA="${AD_TOKDATA}")
add_dependencies(bench-tokenizer tokdata)

if(COMMAND ad_fuzz)
  # the Jinja interpreter: seeded with the feature snippets and every real template
  ad_fuzz(NAME jinja SOURCES fuzz/fuzz-jinja.c CORPUS fuzz/corpus-jinja LIBS anedvd_tokenizer SEEDS data/jinja/templates)
  ad_fuzz(NAME tokenizer SOURCES fuzz/fuzz-tokenizer.c CORPUS fuzz/corpus-tokenizer LIBS anedvd_tokenizer)
  foreach(t fuzz-tokenizer-replay fuzz-tokenizer)
    if(TARGET ${t})
      target_compile_definitions(${t} PRIVATE T_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data")
    endif()
  endforeach()
endif()

# the Jinja interpreter against Python's jinja2: test-jinja replays what the
# judge (jinja-judge.py) recorded in data/jinja/expected; test-jinja-judge
# has jinja2 (Debian's python3-jinja2) render everything again and checks
# the records are still its own
ad_test(NAME test-jinja SOURCES test-jinja.c LIBS anedvd_tokenizer LABELS unit)
# the same templates and conversations through tok_chat_render, the service's path
ad_test(NAME test-chat SOURCES test-chat.c LIBS anedvd_tokenizer LABELS unit)
find_program(AD_PYTHON3 python3)
if(NOT AD_PYTHON3)
  set(AD_PYTHON3 python3)
endif()
add_test(NAME test-jinja-judge
  COMMAND ${AD_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/jinja-judge.py check ${CMAKE_CURRENT_SOURCE_DIR}/data/jinja)
set_tests_properties(test-jinja-judge PROPERTIES LABELS unit TIMEOUT 300)
# tokenizer.json normalizers, pre-tokenizers and the Unigram model
ad_test(NAME test-ugm SOURCES test-ugm.c LIBS anedvd_tokenizer LABELS unit)
target_compile_definitions(test-ugm PRIVATE T_TOKDATA="${AD_TOKDATA}")
add_dependencies(test-ugm tokdata)

# these reach into the tokenizer library's own headers (jinja.h, tokenizer-impl.h, ...)
foreach(t test-tokenizer bench-tokenizer test-jinja test-chat test-ugm fuzz-jinja-replay fuzz-jinja
          fuzz-tokenizer-replay fuzz-tokenizer)
  if(TARGET ${t})
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/tokenizer-svc)
  endif()
endforeach()
