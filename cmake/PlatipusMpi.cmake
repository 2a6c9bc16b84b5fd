# PLATIPUS_WITH_MPI: AUTO builds platipus::mpi (distributed/mpi.hpp, the
# MPI communicator) when find_package(MPI) finds MPI's C++ bindings (Debian:
# libopenmpi-dev, openmpi-bin). PLATIPUS_WITH_NCCL: AUTO builds platipus::nccl
# (distributed/nccl.hpp) when the CUDA targets, MPI, nccl.h and libnccl are
# all found (beside CUDA, or under NCCL_ROOT). Both are optional, as CUDA is:
# a single process needs neither.
set(PLATIPUS_WITH_MPI AUTO CACHE STRING "Build platipus::mpi, the MPI communicator: ON, OFF or AUTO (when MPI is found)")
set_property(CACHE PLATIPUS_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set(PLATIPUS_WITH_NCCL AUTO CACHE STRING "Build platipus::nccl, the NCCL communicator: ON, OFF or AUTO (when CUDA, MPI and NCCL are found)")
set_property(CACHE PLATIPUS_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

set(PLATIPUS_MPI_ENABLED OFF)
if(NOT PLATIPUS_WITH_MPI STREQUAL "OFF")
  if(PLATIPUS_WITH_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS CXX)
  else()
    find_package(MPI QUIET COMPONENTS CXX)
  endif()
  if(MPI_CXX_FOUND)
    set(PLATIPUS_MPI_ENABLED ON)
    add_library(platipus_mpi INTERFACE)
    add_library(platipus::mpi ALIAS platipus_mpi)
    set_target_properties(platipus_mpi PROPERTIES EXPORT_NAME mpi)
    target_link_libraries(platipus_mpi INTERFACE platipus::platipus MPI::MPI_CXX)
    target_compile_definitions(platipus_mpi INTERFACE PLATIPUS_WITH_MPI=1)
    # The tests' and examples' launcher: 2 ranks on this machine, however few
    # its cores (Open MPI needs --oversubscribe for that; MPICH's mpiexec
    # allows it and refuses the flag); Open MPI refuses to run as root
    # (containers, CI) unless told.
    set(PLATIPUS_MPIRUN_2 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2)
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE launcher ERROR_VARIABLE launcher)
    if(launcher MATCHES "Open MPI|OpenRTE")
      list(APPEND PLATIPUS_MPIRUN_2 --oversubscribe)
    endif()
    set(PLATIPUS_MPI_ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endif()
endif()
message(STATUS "platipus: MPI communicator (platipus::mpi) ${PLATIPUS_MPI_ENABLED}")

set(PLATIPUS_NCCL_ENABLED OFF)
if(NOT PLATIPUS_WITH_NCCL STREQUAL "OFF")
  set(why "")
  if(NOT PLATIPUS_CUDA_ENABLED)
    set(why "no CUDA targets")
  elseif(NOT PLATIPUS_MPI_ENABLED)
    set(why "no MPI (NCCL's communicator is bootstrapped through MPI)")
  else()
    find_path(PLATIPUS_NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(PLATIPUS_NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib64 lib)
    if(NOT PLATIPUS_NCCL_INCLUDE_DIR OR NOT PLATIPUS_NCCL_LIBRARY)
      set(why "nccl.h or libnccl not found (set NCCL_ROOT)")
    endif()
  endif()
  if(why STREQUAL "")
    set(PLATIPUS_NCCL_ENABLED ON)
    add_library(platipus_nccl INTERFACE)
    add_library(platipus::nccl ALIAS platipus_nccl)
    set_target_properties(platipus_nccl PROPERTIES EXPORT_NAME nccl)
    target_include_directories(platipus_nccl INTERFACE ${PLATIPUS_NCCL_INCLUDE_DIR})
    target_link_libraries(platipus_nccl INTERFACE platipus::cuda platipus::mpi ${PLATIPUS_NCCL_LIBRARY})
    target_compile_definitions(platipus_nccl INTERFACE PLATIPUS_WITH_NCCL=1)
  elseif(PLATIPUS_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "PLATIPUS_WITH_NCCL=ON but ${why}")
  else()
    message(STATUS "platipus: NCCL communicator skipped: ${why}")
  endif()
endif()
message(STATUS "platipus: NCCL communicator (platipus::nccl) ${PLATIPUS_NCCL_ENABLED}")
