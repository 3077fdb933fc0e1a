include(CMakePackageConfigHelpers)
install(EXPORT ACCLTargets NAMESPACE ACCL:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ACCL)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ACCLConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ACCLConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ACCL)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ACCLConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ACCLConfig.cmake ${CMAKE_BINARY_DIR}/ACCLConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ACCL)
configure_file(${CMAKE_CURRENT_LIST_DIR}/accl.pc.in ${CMAKE_BINARY_DIR}/accl.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/accl.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
