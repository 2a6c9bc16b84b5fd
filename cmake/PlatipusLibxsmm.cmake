# PLATIPUS_WITH_LIBXSMM: AUTO gives the CPU backend libxsmm's kernels for
# small matrix products (backend/cpu/small_gemm.hpp) when libxsmm is found
# (Debian: libxsmm-dev). The platipus target then defines
# PLATIPUS_HAVE_LIBXSMM and links libxsmm, for the project's programs and for
# consumers of the installed package alike.
set(PLATIPUS_LIBXSMM_ENABLED OFF)
if(NOT PLATIPUS_WITH_LIBXSMM STREQUAL "OFF")
  find_package(Libxsmm)
  if(Libxsmm_FOUND)
    set(PLATIPUS_LIBXSMM_ENABLED ON)
  elseif(PLATIPUS_WITH_LIBXSMM STREQUAL "ON")
    message(FATAL_ERROR "PLATIPUS_WITH_LIBXSMM=ON but libxsmm (libxsmm-dev) was not found")
  endif()
endif()
message(STATUS "platipus: libxsmm small matrix products ${PLATIPUS_LIBXSMM_ENABLED}")
if(PLATIPUS_LIBXSMM_ENABLED)
  target_compile_definitions(platipus INTERFACE PLATIPUS_HAVE_LIBXSMM)
  target_link_libraries(platipus INTERFACE Libxsmm::Libxsmm)
endif()
