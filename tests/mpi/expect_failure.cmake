# ctest driver: runs COMMAND (a list), which must fail: a non-zero status,
# MESSAGE in its output, and no hang (every rank gone within 30 seconds).
# Inputs: -DCOMMAND, -DMESSAGE.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out
                TIMEOUT 30)
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")
message("${out}")
if(status EQUAL 0)
  message(FATAL_ERROR "the command succeeded, and it had to fail")
endif()
if(status MATCHES "timeout")
  message(FATAL_ERROR "a rank hung: still running after 30 seconds")
endif()
string(FIND "${out}" "${MESSAGE}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the output does not say \"${MESSAGE}\"")
endif()
message("failed as it should, status ${status}, after ${seconds} s")
