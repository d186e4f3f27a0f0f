# dequantisation, fp16 helpers, safetensors, Hugging Face model directories
ad_test(NAME test-dequant SOURCES test-dequant.c LABELS unit)
ad_test(NAME test-safetensors SOURCES test-safetensors.c LABELS unit)
# HF directories are checked through the reference engine's logits
if(TARGET anedvd_cpu)
  ad_test(NAME test-hf SOURCES test-hf.c LIBS anedvd_cpu LABELS integration)
else()
  message(WARNING "test-hf needs the reference engine (cpu-worker); not built")
endif()

# a benchmark prints figures; it is built but not run by ctest
add_executable(bench-dequant bench-dequant.c)
target_link_libraries(bench-dequant PRIVATE anedvd_common)
