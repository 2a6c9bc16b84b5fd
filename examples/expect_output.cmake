# cmake -DPATTERN=regex [-DSUCCESS=ON] -P expect_output.cmake -- PROGRAM ARGS...:
# fails unless PROGRAM exits with a non-zero status, without a signal (with
# SUCCESS, with status 0), and prints a line matching PATTERN: a refused
# command line or input, not a crash or a run (with SUCCESS, a run that says
# PATTERN and ends well).
cmake_minimum_required(VERSION 3.24)
set(command "")
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
if(SUCCESS AND NOT status STREQUAL "0")
  message(FATAL_ERROR "${command}: exit status '${status}', expected 0\n${out}${err}")
elseif(NOT SUCCESS AND (NOT status MATCHES "^[0-9]+$" OR status EQUAL 0))
  message(FATAL_ERROR "${command}: exit status '${status}', expected a refusal\n${out}${err}")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
  message(FATAL_ERROR "${command}: output does not match '${PATTERN}':\n${out}${err}")
endif()
message(STATUS "status ${status} as expected: ${err}")
