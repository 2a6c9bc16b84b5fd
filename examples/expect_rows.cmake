# cmake -DFILE=path -DPATTERN=regex -P expect_rows.cmake: fails unless FILE
# exists and has a line matching PATTERN (a metrics file a stopped run left).
if(NOT EXISTS "${FILE}")
  message(FATAL_ERROR "${FILE} does not exist")
endif()
file(STRINGS "${FILE}" rows REGEX "${PATTERN}")
list(LENGTH rows count)
if(count EQUAL 0)
  message(FATAL_ERROR "${FILE} has no line matching ${PATTERN}")
endif()
message(STATUS "${FILE}: ${count} line(s) matching ${PATTERN}")
