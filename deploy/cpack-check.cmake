# deploy/cpack-check.cmake - cpack reads this before it packages
# (CPACK_PROJECT_CONFIG_FILE): a package is made only from a build that
# runs on other machines. ANEDVD_NATIVE builds for the build machine's CPU
# (-march=native: instructions outside the dispatched kernels that another
# CPU may lack); ANEDVD_SANITIZE builds need the sanitizer runtimes and run
# slowly. `cmake -DCPACK_ANEDVD_NATIVE=ON -P deploy/cpack-check.cmake` fails.
if(CPACK_ANEDVD_NATIVE)
  message(FATAL_ERROR "anedvd: this build was configured with ANEDVD_NATIVE=ON (-march=native) and may not "
                      "run on another CPU: configure with -DANEDVD_NATIVE=OFF to make a package")
endif()
if(CPACK_ANEDVD_SANITIZE)
  message(FATAL_ERROR "anedvd: this build was configured with ANEDVD_SANITIZE=ON: configure without it "
                      "to make a package")
endif()
