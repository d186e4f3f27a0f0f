# Fuzz targets. Each area declares its target once:
#
#   ad_fuzz(NAME gguf SOURCES fuzz/fuzz-gguf.c CORPUS fuzz/corpus-gguf [LIBS ...] [SEEDS dir...])
#
# The target source defines LLVMFuzzerTestOneInput. Always built: a plain
# driver fuzz-<name>-replay (fuzz/fuzz-main.c) and the ctest test
# fuzz-<name>-regress (label fuzz-regress), which replays the seed corpus and
# every crash ever found (fuzz/crashes-<name>/), and any SEEDS directories
# (inputs kept elsewhere in tests/, which run-fuzz.sh also seeds from: it
# reads them from fuzz/<name>.seeds). With -DANEDVD_FUZZ=ON and
# clang, also the libFuzzer binary fuzz-<name>; fuzz/run-fuzz.sh configures
# such a build and runs it. The libraries under test are then compiled with
# coverage instrumentation; the sanitizers come from -DANEDVD_SANITIZE=ON.

# areas whose .cmake sorts before this one may include() it first
include_guard(GLOBAL)

set(AD_FUZZ_LIBFUZZER OFF)
if(ANEDVD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(WARNING "ANEDVD_FUZZ needs clang (configure with -DCMAKE_C_COMPILER=clang); building the replay drivers only")
  elseif(NOT ANEDVD_SANITIZE)
    message(FATAL_ERROR "ANEDVD_FUZZ=ON needs ANEDVD_SANITIZE=ON: a fuzzer without the address sanitizer misses out-of-bounds reads")
  else()
    set(AD_FUZZ_LIBFUZZER ON)
  endif()
endif()

function(ad_fuzz)
  cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBS;SEEDS" ${ARGN})
  set(crashes ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/crashes-${F_NAME})
  set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/${F_CORPUS})

  add_executable(fuzz-${F_NAME}-replay ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz-main.c ${F_SOURCES})
  target_link_libraries(fuzz-${F_NAME}-replay PRIVATE ${F_LIBS} anedvd_common)
  set(dirs ${corpus})
  foreach(s ${F_SEEDS})
    list(APPEND dirs ${CMAKE_CURRENT_SOURCE_DIR}/${s})
  endforeach()
  if(EXISTS ${crashes})
    list(APPEND dirs ${crashes})
  endif()
  add_test(NAME fuzz-${F_NAME}-regress COMMAND fuzz-${F_NAME}-replay ${dirs})
  set_tests_properties(fuzz-${F_NAME}-regress PROPERTIES LABELS fuzz-regress TIMEOUT 600)

  if(AD_FUZZ_LIBFUZZER)
    foreach(lib anedvd_common ${F_LIBS})
      if(TARGET ${lib})
        target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
      endif()
    endforeach()
    add_executable(fuzz-${F_NAME} ${F_SOURCES})
    target_compile_options(fuzz-${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz-${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz-${F_NAME} PRIVATE ${F_LIBS} anedvd_common)
  endif()
endfunction()

ad_fuzz(NAME gguf SOURCES fuzz/fuzz-gguf.c CORPUS fuzz/corpus-gguf)
