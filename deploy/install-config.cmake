# deploy/install-config.cmake - run at install time (cmake --install, cpack,
# deploy/install.sh): the service definition and the settings file, with
# the paths of the prefix the install is made for.
#
# deploy/systemd/anedvd.service, deploy/anedvd.conf and the launchd plist
# are written for the prefix /usr/local; here /usr/local/etc becomes
# SYSCONFDIR, /usr/local/bin and /usr/local/share the prefix's bin and
# share, and any other /usr/local the prefix:
#   SYSCONFDIR  $ANEDVD_SYSCONFDIR, else /etc for the prefix /usr or /,
#               else PREFIX/etc
#   the unit    $ANEDVD_UNITDIR, else PREFIX/lib/systemd/system (Linux;
#               none with ANEDVD_NO_UNIT set)
#   the plist   PREFIX/share/anedvd/launchd (macOS; install.sh puts it in place)
# SYSCONFDIR/anedvd/anedvd.conf is written only where there is none: an
# edited file stays (in the .deb it is a conffile, which dpkg keeps).
# DESTDIR is honoured. Set by the install rule (deploy/install.cmake):
# AD_DEPLOY, AD_STAGE, AD_BINDIR, AD_DATADIR, AD_APPLE.
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "(.)/+$" "\\1" prefix "${prefix}")
if(NOT "$ENV{ANEDVD_SYSCONFDIR}" STREQUAL "")
  set(sysconf "$ENV{ANEDVD_SYSCONFDIR}")
elseif(prefix STREQUAL "/usr" OR prefix STREQUAL "/")
  set(sysconf "/etc")
else()
  set(sysconf "${prefix}/etc")
endif()
if(prefix STREQUAL "/")
  set(prefix "")
endif()

function(ad_rewrite in out)
  file(READ "${in}" text)
  string(REPLACE "/usr/local/etc/" "@AD_SYSCONF@/" text "${text}")
  string(REPLACE "/usr/local/bin" "@AD_BIN@" text "${text}")
  string(REPLACE "/usr/local/share" "@AD_DATA@" text "${text}")
  string(REPLACE "/usr/local/" "@AD_PREFIX@/" text "${text}")
  string(REPLACE "@AD_SYSCONF@" "${sysconf}" text "${text}")
  string(REPLACE "@AD_BIN@" "${prefix}/${AD_BINDIR}" text "${text}")
  string(REPLACE "@AD_DATA@" "${prefix}/${AD_DATADIR}" text "${text}")
  string(REPLACE "@AD_PREFIX@" "${prefix}" text "${text}")
  file(WRITE "${out}" "${text}")
endfunction()

file(MAKE_DIRECTORY "${AD_STAGE}")
if(AD_APPLE)
  ad_rewrite("${AD_DEPLOY}/launchd/com.anedvd.serve.plist" "${AD_STAGE}/com.anedvd.serve.plist")
  file(INSTALL DESTINATION "${prefix}/${AD_DATADIR}/anedvd/launchd" TYPE FILE
       FILES "${AD_STAGE}/com.anedvd.serve.plist")
elseif("$ENV{ANEDVD_NO_UNIT}" STREQUAL "")
  if(NOT "$ENV{ANEDVD_UNITDIR}" STREQUAL "")
    set(unitdir "$ENV{ANEDVD_UNITDIR}")
  else()
    set(unitdir "${prefix}/lib/systemd/system")
  endif()
  ad_rewrite("${AD_DEPLOY}/systemd/anedvd.service" "${AD_STAGE}/anedvd.service")
  file(INSTALL DESTINATION "${unitdir}" TYPE FILE FILES "${AD_STAGE}/anedvd.service")
endif()

ad_rewrite("${AD_DEPLOY}/anedvd.conf" "${AD_STAGE}/anedvd.conf")
if(EXISTS "$ENV{DESTDIR}${sysconf}/anedvd/anedvd.conf")
  message(STATUS "Kept: $ENV{DESTDIR}${sysconf}/anedvd/anedvd.conf")
else()
  # API keys may be in it: the owner alone reads it (systemd reads it as root)
  file(INSTALL DESTINATION "${sysconf}/anedvd" TYPE FILE FILES "${AD_STAGE}/anedvd.conf"
       PERMISSIONS OWNER_READ OWNER_WRITE)
endif()
