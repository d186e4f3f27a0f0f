# The installation: cmake --install and deploy/install.sh (test-deploy), and
# the Debian package built with cpack, unpacked into a scratch root and run
# from there (test-package; tests/test-deploy.sh says what each checks).
# The package is made only from a build without the sanitizers
# (deploy/cpack-check.cmake), so test-package runs in the plain pass of
# `make test`; it needs Debian's dpkg, man-db and systemd
# (deploy/install-deps.sh --test).
add_test(NAME test-deploy COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-deploy.sh install
         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test-deploy PROPERTIES LABELS "integration;package" TIMEOUT 300)
if(NOT ANEDVD_SANITIZE AND NOT ANEDVD_NATIVE AND CMAKE_SYSTEM_NAME STREQUAL "Linux")
  add_test(NAME test-package COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test-deploy.sh package
           ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  set_tests_properties(test-package PROPERTIES LABELS package TIMEOUT 300)
endif()
