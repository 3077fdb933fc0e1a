# Runs in the staging tree after the install step, before cpack packs it
# (CPACK_PRE_BUILD_SCRIPTS). Debian packages install into the system's library
# path and must carry no run path (lintian: custom-library-search-path), so the
# install run paths that a prefix install needs ($ORIGIN/../lib) come off. The
# relocatable .tgz keeps only its $ORIGIN entries (no folder of the build host).
find_program(_patchelf patchelf REQUIRED)
file(GLOB_RECURSE _files LIST_DIRECTORIES false "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
foreach(_f ${_files})
  if(IS_SYMLINK "${_f}")
    continue()
  endif()
  file(READ "${_f}" _magic LIMIT 4 HEX)
  if(_magic STREQUAL "7f454c46")  # ELF
    if(CPACK_GENERATOR STREQUAL "DEB")
      execute_process(COMMAND ${_patchelf} --remove-rpath "${_f}" RESULT_VARIABLE _rc)
    else()
      execute_process(COMMAND ${_patchelf} --print-rpath "${_f}" OUTPUT_VARIABLE _rpath OUTPUT_STRIP_TRAILING_WHITESPACE)
      string(REPLACE ":" ";" _entries "${_rpath}")
      list(FILTER _entries INCLUDE REGEX "^\\$ORIGIN")
      list(JOIN _entries ":" _kept)
      execute_process(COMMAND ${_patchelf} --set-rpath "${_kept}" "${_f}" RESULT_VARIABLE _rc)
    endif()
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "patchelf --remove-rpath ${_f} failed")
    endif()
  endif()
endforeach()
