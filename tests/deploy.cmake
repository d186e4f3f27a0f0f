# The installation: cmake --install and deploy/install.sh (test-deploy;
# tests/test-deploy.sh says what it checks).
add_test(NAME test-deploy COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-deploy.sh install
         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test-deploy PROPERTIES LABELS integration TIMEOUT 300)
