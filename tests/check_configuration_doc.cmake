# docs/configuration.md must be exactly what `hpctrain docs options` generates from the option table.
execute_process(COMMAND ${BIN} docs options OUTPUT_VARIABLE generated RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "hpctrain docs options failed (${rc})")
endif()
file(READ ${DOC} committed)
if(NOT generated STREQUAL committed)
  message(FATAL_ERROR "${DOC} is out of date; regenerate it with: hpctrain docs options > docs/configuration.md")
endif()
