# ctest driver: installs the build tree into a scratch prefix, then builds
# and runs the consumer against it, and again through add_subdirectory.
# Inputs: -DBUILD_DIR (platipus's build tree), -DSOURCE_DIR (platipus's
# sources), -DWORK_DIR (scratch), -DIMAGES (whether platipus::images was built),
# -DMPI (whether platipus::mpi was), -DMPIRUN (its launcher of 2 ranks, "|" between words).
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGV}\n${out}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package -B ${WORK_DIR}/installed -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/installed)
run(${WORK_DIR}/installed/consumer)
run(${WORK_DIR}/installed/train_maml)
if(IMAGES)  # platipus::images was built: its consumer must be too
  run(${WORK_DIR}/installed/images_consumer)
endif()
if(MPI)
  run(${WORK_DIR}/installed/mpi_consumer)
  string(REPLACE "|" ";" mpirun "${MPIRUN}")
  run(${mpirun} ${WORK_DIR}/installed/mpi_consumer)
endif()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package -B ${WORK_DIR}/subdirectory -DPLATIPUS_SOURCE_DIR=${SOURCE_DIR}
    -DPLATIPUS_WITH_CUDA=OFF -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/subdirectory)
run(${WORK_DIR}/subdirectory/consumer)
run(${WORK_DIR}/subdirectory/train_maml)
if(IMAGES)
  run(${WORK_DIR}/subdirectory/images_consumer)
endif()
if(MPI)
  run(${WORK_DIR}/subdirectory/mpi_consumer)
endif()
