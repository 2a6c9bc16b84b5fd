# PLATIPUS_WITH_CUDA: AUTO enables the CUDA targets when a CUDA compiler is found.
set(PLATIPUS_CUDA_ENABLED OFF)
if(NOT PLATIPUS_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # cuDNN 9 for the convolutions: in the CUDA toolkit's folders, or under CUDNN_ROOT.
    find_package(CUDAToolkit)
    find_path(PLATIPUS_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include)
    find_library(PLATIPUS_CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
                 PATH_SUFFIXES lib64 lib)
    if(PLATIPUS_CUDNN_INCLUDE_DIR AND PLATIPUS_CUDNN_LIBRARY)
      set(PLATIPUS_CUDA_ENABLED ON)
    elseif(PLATIPUS_WITH_CUDA STREQUAL "ON")
      message(FATAL_ERROR "PLATIPUS_WITH_CUDA=ON but cuDNN 9 (cudnn.h, libcudnn) was not found; set CUDNN_ROOT")
    else()
      message(STATUS "platipus: cuDNN not found (set CUDNN_ROOT), so no CUDA targets")
    endif()
  elseif(PLATIPUS_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PLATIPUS_WITH_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
message(STATUS "platipus: CUDA backend targets ${PLATIPUS_CUDA_ENABLED}")
if(NOT PLATIPUS_CUDA_ENABLED)
  return()
endif()

# Ampere and Hopper unless the user says otherwise (e.g. "native" or "90").
set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of the platipus::cuda kernels")
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# platipus::cuda: the CUDA backend's kernels (nvcc) and host side (the C++
# compiler). It uses the static CUDA runtime, as CMake links programs with
# CUDA code by default, so that a program has one runtime, which it shares
# with the library when it calls the runtime itself.
add_library(platipus_cuda STATIC src/cuda/kernels.cu src/cuda/runtime.cpp src/cuda/graph.cpp
                                 src/cuda/convolution.cpp)
add_library(platipus::cuda ALIAS platipus_cuda)
set_target_properties(platipus_cuda PROPERTIES EXPORT_NAME cuda POSITION_INDEPENDENT_CODE ON)
target_compile_features(platipus_cuda PUBLIC cxx_std_20)
if("cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  target_compile_features(platipus_cuda PRIVATE cuda_std_20)
else()  # CMake before 3.27 does not know nvcc's C++20
  target_compile_options(platipus_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
endif()
# The shared formulas (op_codes.hpp, philox.hpp) are constexpr host code
# that kernels call: std::array access and <cmath> functions.
target_compile_options(platipus_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
target_link_libraries(platipus_cuda PUBLIC platipus::platipus CUDA::cudart_static PRIVATE CUDA::cublas CUDA::cublasLt)
target_include_directories(platipus_cuda PRIVATE ${PLATIPUS_CUDNN_INCLUDE_DIR})
target_link_libraries(platipus_cuda PRIVATE ${PLATIPUS_CUDNN_LIBRARY})

# The CUDA tests and benchmark, defined once the top level has enabled
# testing and defined platipus_project_flags. The tests are one ctest entry,
# labelled cuda and skipped (exit code 77) where there is no CUDA device.
function(platipus_cuda_programs)
  if(PLATIPUS_BUILD_TESTS)
    find_package(Catch2 REQUIRED)
    set(dir ${PROJECT_SOURCE_DIR}/tests/cuda)
    add_executable(platipus_cuda_tests ${dir}/main.cpp ${dir}/backend_test.cpp ${dir}/ops_test.cpp ${dir}/meta_test.cpp ${dir}/graph_test.cpp)
    # The tests' own main checks for a device, so both Catch2 versions link without theirs.
    target_link_libraries(platipus_cuda_tests PRIVATE platipus::cuda platipus_project_flags Catch2::Catch2)
    set_target_properties(platipus_cuda_tests PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
    add_test(NAME platipus_cuda_tests COMMAND platipus_cuda_tests)
    set_tests_properties(platipus_cuda_tests PROPERTIES LABELS cuda SKIP_RETURN_CODE 77)
  endif()
  if(PLATIPUS_BUILD_BENCHMARKS)
    find_package(benchmark REQUIRED)
    add_executable(platipus_cuda_benchmarks ${PROJECT_SOURCE_DIR}/benchmarks/cuda_meta_step.cpp)
    target_link_libraries(platipus_cuda_benchmarks PRIVATE platipus::cuda platipus_project_flags benchmark::benchmark_main)
    set_target_properties(platipus_cuda_benchmarks PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/benchmarks)
  endif()
endfunction()
cmake_language(DEFER CALL platipus_cuda_programs)
