# The folders' rooms: no worker folder includes another worker's headers
# (tests/check-includes.sh). The compiler refuses the ane-worker / cpu-worker
# pair as well: neither library links the other, so neither sees the other's
# folder on its include path; and the worker libraries' own folders are
# PRIVATE (their public headers are in each folder's include/).
add_test(NAME test-includes COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/check-includes.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(test-includes PROPERTIES LABELS unit TIMEOUT 60)
