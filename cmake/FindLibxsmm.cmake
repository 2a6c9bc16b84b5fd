# Finds libxsmm (Debian's libxsmm-dev: /usr/include/libxsmm.h and the static
# /usr/lib/libxsmm.a, with libxsmmnoblas.a for the BLAS fallback it does not
# need here). Defines the target Libxsmm::Libxsmm.
find_path(Libxsmm_INCLUDE_DIR libxsmm.h)
find_library(Libxsmm_LIBRARY xsmm)
find_library(Libxsmm_NOBLAS_LIBRARY xsmmnoblas)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libxsmm
  REQUIRED_VARS Libxsmm_INCLUDE_DIR Libxsmm_LIBRARY Libxsmm_NOBLAS_LIBRARY)
mark_as_advanced(Libxsmm_INCLUDE_DIR Libxsmm_LIBRARY Libxsmm_NOBLAS_LIBRARY)
if(Libxsmm_FOUND AND NOT TARGET Libxsmm::Libxsmm)
  find_package(Threads REQUIRED)
  add_library(Libxsmm::Libxsmm UNKNOWN IMPORTED)
  set_target_properties(Libxsmm::Libxsmm PROPERTIES
    IMPORTED_LOCATION "${Libxsmm_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${Libxsmm_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${Libxsmm_NOBLAS_LIBRARY};Threads::Threads;${CMAKE_DL_LIBS}")
endif()
