# CLI behaviour test (filled in with the CLI).
execute_process(COMMAND ${BIASLAB} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "biaslab exited ${rc}")
endif()
