# deploy/package.cmake - the Debian package: `cpack -G DEB` in a build
# directory (after the build) writes anedvd_<version>_<arch>.deb with what
# `cmake --install` installs (deploy/install.cmake), for the prefix /usr:
# /usr/bin, /usr/lib/anedvd/ (libanedvd.so, anedvd-dev), the manual pages, /usr/share/anedvd/models/stories260K.gguf,
# /usr/lib/systemd/system/anedvd.service and /etc/anedvd/anedvd.conf (a
# conffile), and the maintainer scripts of deploy/debian/ (the system user
# anedvd). Its dependencies are the shared libraries the programs link
# (dpkg-shlibdeps) and adduser.
#
# The package is for any x86-64 CPU with AVX2, FMA and F16C: the build's
# baseline (ANEDVD_X86_LEVEL, -march=x86-64-v3), with the AVX-512 kernels
# picked at run time. cpack refuses a build made with ANEDVD_NATIVE (whose
# programs may stop on another CPU with an illegal instruction) or the
# sanitizers (deploy/cpack-check.cmake).
set(ANEDVD_PACKAGE_CONTACT "anedvd maintainers <maintainers@anedvd.invalid>" CACHE STRING
    "the Maintainer field of the .deb")
set(CPACK_PACKAGE_NAME anedvd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${ANEDVD_PACKAGE_CONTACT}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "LLM inference on the Apple Neural Engine, without CoreML (emu backend elsewhere)")
set(CPACK_PACKAGE_DESCRIPTION "anedvd serves OpenAI- and Anthropic-compatible HTTP APIs and a WebUI
from a multi-process pipeline: a tokenizer service, a CPU worker and a worker
that runs the model's projections as ANE programs (on the Neural Engine on
macOS, on the CPU elsewhere). Commands: run, chat, serve, verify and more
(man anedvd). The anedvd.service unit runs the server as the user anedvd
with the settings in /etc/anedvd/anedvd.conf. Needs an x86-64 CPU with
AVX2, FMA and F16C.")
set(CPACK_GENERATOR DEB)
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
# what cpack-check.cmake looks at (CPACK_* variables reach cpack's scripts)
set(CPACK_ANEDVD_NATIVE "${ANEDVD_NATIVE}")
set(CPACK_ANEDVD_SANITIZE "${ANEDVD_SANITIZE}")
set(CPACK_ANEDVD_X86_LEVEL "${ANEDVD_X86_LEVEL}")
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/deploy/cpack-check.cmake)
include(CPack)
