# Unicode tables, pre-tokenizers and byte-level BPE.
# (CHECK without a message expands to an empty printf format)
ad_test(NAME test-unicode SOURCES test-unicode.c LIBS anedvd_tokenizer LABELS unit)
target_compile_options(test-unicode PRIVATE -Wno-format-zero-length)
target_include_directories(test-unicode PRIVATE ${PROJECT_SOURCE_DIR}/tokenizer-svc)
ad_test(NAME test-bpe SOURCES test-bpe.c LIBS anedvd_tokenizer LABELS unit)
target_compile_options(test-bpe PRIVATE -Wno-format-zero-length)
