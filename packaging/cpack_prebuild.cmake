# Runs in the staging tree after the install step, before cpack packs it
# (CPACK_PRE_BUILD_SCRIPTS). Debian packages install into the system's library
# path and must carry no run path (lintian: custom-library-search-path), so the
# install run paths that a prefix install needs ($ORIGIN/../lib) come off.
if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
find_program(_patchelf patchelf REQUIRED)
file(GLOB_RECURSE _files LIST_DIRECTORIES false "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
foreach(_f ${_files})
  if(IS_SYMLINK "${_f}")
    continue()
  endif()
  file(READ "${_f}" _magic LIMIT 4 HEX)
  if(_magic STREQUAL "7f454c46")  # ELF
    execute_process(COMMAND ${_patchelf} --remove-rpath "${_f}" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "patchelf --remove-rpath ${_f} failed")
    endif()
  endif()
endforeach()
