# cmake --install: headers, the platipus::platipus target (and platipus::images,
# platipus::cuda, platipus::mpi and platipus::nccl when they are built) and a
# package config, so that a downstream project can
# find_package(platipus CONFIG REQUIRED [COMPONENTS images cuda mpi nccl]).
include(CMakePackageConfigHelpers)
install(DIRECTORY include/platipus TYPE INCLUDE)
install(TARGETS platipus EXPORT platipusTargets)
if(PLATIPUS_IMAGES_ENABLED)
  install(TARGETS platipus_images EXPORT platipusTargets)
endif()
if(PLATIPUS_MPI_ENABLED)
  install(TARGETS platipus_mpi EXPORT platipusTargets)
endif()
if(PLATIPUS_NCCL_ENABLED)
  install(TARGETS platipus_nccl EXPORT platipusTargets)
endif()
if(PLATIPUS_CUDA_ENABLED)
  install(TARGETS platipus_cuda EXPORT platipusTargets)
  set(platipus_architecture "")  # a compiled library: the package is for this architecture only
else()
  set(platipus_architecture ARCH_INDEPENDENT)
endif()
install(EXPORT platipusTargets NAMESPACE platipus:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/platipus)
configure_package_config_file(cmake/platipusConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/platipusConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/platipus)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/platipusConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ${platipus_architecture})
install(FILES
  cmake/FindStb.cmake
  cmake/FindLibxsmm.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/platipusConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/platipusConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/platipus)
