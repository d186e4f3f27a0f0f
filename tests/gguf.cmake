# GGUF reader and writer.
ad_test(NAME test-gguf SOURCES test-gguf.c LABELS unit)
