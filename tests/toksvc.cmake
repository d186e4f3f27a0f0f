# The tokenizer service: in-process server and the real anedvd-tokenizer process.
if(TARGET anedvd_toksvc)
  ad_test(NAME test-toksvc SOURCES test-toksvc.c LIBS anedvd_toksvc anedvd_proto anedvd_common LABELS integration)
  target_compile_definitions(test-toksvc PRIVATE TOKSVC_BIN="$<TARGET_FILE:anedvd-tokenizer>")
  add_dependencies(test-toksvc anedvd-tokenizer)
endif()
