# Installation layout (find_package(ACCL), pkg-config) and the packages:
# CPack .deb (split as Debian does) and .tgz (everything). See docs/install.md.
include(CMakePackageConfigHelpers)
install(EXPORT ACCLTargets NAMESPACE ACCL:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ACCL COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ACCLConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ACCLConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ACCL)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ACCLConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ACCLConfig.cmake ${CMAKE_BINARY_DIR}/ACCLConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ACCL COMPONENT dev)
configure_file(${CMAKE_CURRENT_LIST_DIR}/accl.pc.in ${CMAKE_BINARY_DIR}/accl.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/accl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# ---------------------------------------------------------------- packages
# One package per component: the runtime (libaccl and the accl backend), one
# per optional backend module (a host without gloo, Open MPI or NCCL installs
# all but that one), verbs (the libraries the accl backend loads for RDMA),
# the tools, and -dev.
set(ACCL_PKG_RUNTIME libaccl${PROJECT_VERSION_MAJOR})
set(_components runtime tools dev)
foreach(_b gloo mpi nccl)
  if(_b IN_LIST ACCL_BUILT_BACKENDS)
    list(APPEND _components ${_b})
  endif()
endforeach()
if(ACCL_HAVE_IBVERBS)
  list(APPEND _components verbs)
endif()

set(_deb_runtime ${ACCL_PKG_RUNTIME})
set(_deb_gloo ${ACCL_PKG_RUNTIME}-gloo)
set(_deb_mpi ${ACCL_PKG_RUNTIME}-mpi)
set(_deb_nccl ${ACCL_PKG_RUNTIME}-nccl)
set(_deb_verbs ${ACCL_PKG_RUNTIME}-verbs)
set(_deb_tools accl-tools)
set(_deb_dev libaccl-dev)

# Every package carries the copyright file and changelog Debian asks for.
set(_changelog ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/packaging)
execute_process(COMMAND gzip -9nc ${PROJECT_SOURCE_DIR}/packaging/debian/changelog
  OUTPUT_FILE ${_changelog} RESULT_VARIABLE _gz)
foreach(_c ${_components})
  install(FILES ${PROJECT_SOURCE_DIR}/packaging/debian/copyright ${_changelog}
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${_deb_${_c}} COMPONENT ${_c})
endforeach()

set(CPACK_PACKAGE_NAME accl)
set(CPACK_PACKAGE_VENDOR "The ACCL Authors")
set(CPACK_PACKAGE_CONTACT "ACCL Authors <accl-dev@lists.example.org>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL ${_components})
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)   # one .tgz with everything
configure_file(${PROJECT_SOURCE_DIR}/packaging/cpack_project.cmake.in ${CMAKE_BINARY_DIR}/packaging/cpack_project.cmake COPYONLY)
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/packaging/cpack_project.cmake)
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/packaging/cpack_prebuild.cmake)
set(CPACK_PACKAGE_FILE_NAME accl-${PROJECT_VERSION}-Linux-${CMAKE_SYSTEM_PROCESSOR})

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)      # Depends from the libraries each binary links
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
# libaccl.so.0, which the backend modules and tools link, is in the runtime
# package; the build tree's copy stands in for it (the dependency on the
# runtime package comes from the component dependencies).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
if("nccl" IN_LIST _components)
  # NCCL may come from PyPI at build time; on the installed host it is
  # NVIDIA's libnccl2 package (CUDA repositories, NGC containers).
  get_filename_component(_nccl_dir ${NCCL_LIBRARY} DIRECTORY)
  list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${_nccl_dir})
  set(CPACK_DEBIAN_NCCL_PACKAGE_DEPENDS "libnccl2")
endif()
foreach(_c ${_components})
  string(TOUPPER ${_c} _C)
  set(CPACK_DEBIAN_${_C}_PACKAGE_NAME ${_deb_${_c}})
  if(NOT _c STREQUAL "runtime")
    set(CPACK_COMPONENT_${_C}_DEPENDS runtime)
  endif()
endforeach()
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)   # the shlibs file of libaccl.so.0
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "${_deb_tools}, ${_deb_gloo}, ${_deb_mpi}, ${_deb_verbs}")
# The accl backend loads libibverbs (and UCX's libucm for its registration
# cache) at run time, so nothing links them: this package names them.
set(CPACK_DEBIAN_VERBS_PACKAGE_DEPENDS "libibverbs1, ibverbs-providers")
set(CPACK_DEBIAN_VERBS_PACKAGE_RECOMMENDS "libucx0")
set(CPACK_DEBIAN_VERBS_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "pkgconf | pkg-config")

# Debian descriptions: the synopsis, then the extended text (no
# CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would put it above each).
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "collective communication library for distributed training
ACCL runs allreduce, allgather, reduce-scatter, broadcast, alltoall and the
other collectives of distributed deep-learning training behind one process
group API. This package holds libaccl and its own backend: shared memory
within a host, TCP or RDMA verbs between hosts.")
set(CPACK_DEBIAN_GLOO_DESCRIPTION "ACCL collectives - gloo backend
The gloo backend module for ACCL's process group API.")
set(CPACK_DEBIAN_MPI_DESCRIPTION "ACCL collectives - Open MPI backend
The MPI backend module for ACCL's process group API.")
set(CPACK_DEBIAN_NCCL_DESCRIPTION "ACCL collectives - NCCL backend
The NCCL backend module for ACCL's process group API (CUDA buffers).")
set(CPACK_DEBIAN_VERBS_DESCRIPTION "ACCL collectives - RDMA verbs support
Pulls in the verbs libraries that ACCL's own backend loads at run time to
move data over InfiniBand or RoCE between hosts.")
set(CPACK_DEBIAN_VERBS_PACKAGE_SECTION metapackages)
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "ACCL collectives - tools
accl-info (build, backends, host), accl-run (launcher), accl-perf
(nccl-tests style benchmark), accl-topo (GPU-NIC affinity) and accl-diag
(reads the flight recorder dumps of a job's ranks).")
# accl-diag is a Python 3 script (standard library only).
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "python3")
set(CPACK_DEBIAN_DEV_DESCRIPTION "ACCL collectives - development files
Headers, the CMake package (find_package(ACCL)) and the pkg-config file.")
include(CPack)
