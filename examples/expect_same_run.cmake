# cmake -DFILE=results.json -DCHECKPOINT=checkpoint.safetensors -P
# expect_same_run.cmake: fails unless results.json's run id, the one it
# records for its checkpoint and the one in the checkpoint's own metadata
# are the same (one run's outputs) and not empty.
cmake_minimum_required(VERSION 3.24)
file(READ "${FILE}" json)
string(JSON run GET "${json}" run_id)
string(JSON recorded GET "${json}" checkpoint run_id)
# The safetensors header follows 8 bytes of length; the metadata is a JSON
# string inside it, so its quotes are escaped.
file(READ "${CHECKPOINT}" header OFFSET 8 LIMIT 65536)
string(REGEX MATCH [[run_id\\":\\"([^\\]*)]] found "${header}")
set(stored "${CMAKE_MATCH_1}")
if(run STREQUAL "" OR NOT run STREQUAL recorded OR NOT run STREQUAL stored)
  message(FATAL_ERROR "${FILE}: run_id '${run}', recorded for its checkpoint '${recorded}', "
                      "in ${CHECKPOINT} '${stored}'")
endif()
message(STATUS "${FILE} and ${CHECKPOINT}: run ${run}")
