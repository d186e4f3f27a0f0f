# deploy/install.cmake - what `cmake --install` (and the .deb, deploy/package.cmake)
# puts under the prefix P:
#
#   P/bin/                          the five programs (anedvd finds the others beside itself)
#   P/lib/anedvd/                   libanedvd.so, the library every program runs (found
#                                   through the programs' relative run path, never on
#                                   the linker's), and anedvd-dev, the developer tools
#                                   (not on the PATH, no page)
#   P/share/man/man1/               anedvd.1 and anedvd-<command>.1, written from --help
#                                   at build time (deploy/gen-man.sh)
#   P/share/anedvd/models/          stories260K.gguf, the model run, chat, serve and
#                                   verify take without --model (found from bin/, so the
#                                   build tree has the same layout: build/share/anedvd/...)
#   P/share/doc/anedvd/             README.md and the copyright
#   P/lib/systemd/system/           anedvd.service (Linux), and SYSCONFDIR/anedvd/anedvd.conf
#   P/share/anedvd/launchd/         com.anedvd.serve.plist (macOS)
#
# The last two are written at install time with the paths of the prefix
# the install is made for (deploy/install-config.cmake), so `cmake
# --install --prefix P`, DESTDIR and cpack's /usr all get working files.
# The WebUI is inside anedvd-frontend (frontend/embed.cmake).
include(GNUInstallDirs)
foreach(prog anedvd anedvd-frontend anedvd-tokenizer anedvd-ane-worker anedvd-cpu-worker)
  if(TARGET ${prog})
    install(TARGETS ${prog} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
# the programs' library, private to them: no version in its name, no
# header, nothing else links it
if(TARGET anedvd_lib)
  install(TARGETS anedvd_lib LIBRARY DESTINATION lib/anedvd)
endif()
# the developer tools: off the PATH (the user's commands are anedvd's), yet
# there for a bug report's kernel checks and figures on the machine itself
if(TARGET anedvd-dev)
  install(TARGETS anedvd-dev RUNTIME DESTINATION lib/anedvd)
endif()

# the bundled model, where sup_default_model looks: beside bin/ in the
# build tree as in an installation
set(AD_DEFAULT_MODEL ${PROJECT_SOURCE_DIR}/tests/data/stories260K/stories260K.gguf)
set(AD_MODEL_DIR ${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}/anedvd/models)
add_custom_command(OUTPUT ${AD_MODEL_DIR}/stories260K.gguf
  COMMAND ${CMAKE_COMMAND} -E make_directory ${AD_MODEL_DIR}
  COMMAND ${CMAKE_COMMAND} -E copy ${AD_DEFAULT_MODEL} ${AD_MODEL_DIR}/stories260K.gguf
  DEPENDS ${AD_DEFAULT_MODEL}
  COMMENT "the bundled model beside bin/")
add_custom_target(anedvd_default_model ALL DEPENDS ${AD_MODEL_DIR}/stories260K.gguf)
if(TARGET anedvd)
  add_dependencies(anedvd anedvd_default_model)
endif()
install(FILES ${AD_DEFAULT_MODEL} DESTINATION ${CMAKE_INSTALL_DATADIR}/anedvd/models)

# manual pages from the programs' own --help, rewritten whenever anedvd is
if(TARGET anedvd AND NOT CMAKE_CROSSCOMPILING)
  set(AD_MAN_DIR ${PROJECT_BINARY_DIR}/man)
  add_custom_command(OUTPUT ${AD_MAN_DIR}/stamp
    COMMAND sh ${PROJECT_SOURCE_DIR}/deploy/gen-man.sh $<TARGET_FILE:anedvd> ${AD_MAN_DIR}
    COMMAND ${CMAKE_COMMAND} -E touch ${AD_MAN_DIR}/stamp
    DEPENDS anedvd ${PROJECT_SOURCE_DIR}/deploy/gen-man.sh
    COMMENT "manual pages from anedvd --help")
  add_custom_target(anedvd_man ALL DEPENDS ${AD_MAN_DIR}/stamp)
  install(DIRECTORY ${AD_MAN_DIR}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
          FILES_MATCHING PATTERN "*.1.gz" PATTERN "*.1")
endif()

install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/deploy/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# the service definition and the settings, with the install prefix's paths
install(CODE "set(AD_DEPLOY \"${PROJECT_SOURCE_DIR}/deploy\")
set(AD_STAGE \"${PROJECT_BINARY_DIR}/deploy-stage\")
set(AD_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
set(AD_DATADIR \"${CMAKE_INSTALL_DATADIR}\")
set(AD_APPLE \"${APPLE}\")")
install(SCRIPT ${PROJECT_SOURCE_DIR}/deploy/install-config.cmake)
