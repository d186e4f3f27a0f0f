# Unicode tables, pre-tokenizers and byte-level BPE.
# (CHECK without a message expands to an empty printf format)
ad_test(NAME test-unicode SOURCES test-unicode.c LIBS anedvd_tokenizer LABELS unit)
target_compile_options(test-unicode PRIVATE -Wno-format-zero-length)
