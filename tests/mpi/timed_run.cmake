# Runs COMMAND (a ;-list) and checks how it ended: within MAX_SECONDS, with a non-zero exit
# status when EXPECT_FAILURE is set, and with output matching PASS_REGEX. Used for the MPI
# failure tests whose point is how fast the whole job ends.
#   cmake -DCOMMAND=... -DMAX_SECONDS=5 -DEXPECT_FAILURE=ON -DPASS_REGEX=... -P timed_run.cmake
string(TIMESTAMP start "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
message("${out}${err}")
message("exit status: ${rc}; seconds: ${seconds} (limit ${MAX_SECONDS})")
if(seconds GREATER MAX_SECONDS)
  message(FATAL_ERROR "the job took ${seconds} s, more than ${MAX_SECONDS} s")
endif()
if(EXPECT_FAILURE AND rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; expected a non-zero status")
endif()
if(NOT EXPECT_FAILURE AND NOT rc EQUAL 0)
  message(FATAL_ERROR "the job exited with status ${rc}")
endif()
if(DEFINED PASS_REGEX AND NOT "${out}${err}" MATCHES "${PASS_REGEX}")
  message(FATAL_ERROR "the output does not match '${PASS_REGEX}'")
endif()
