# No source or test may call std::filesystem::remove_all: the libtorch of pip's torch wheels
# exports its own copy of it, which the dynamic linker binds first and which crashes when called
# (docs/building.md). hpctrain::sys::remove_tree does the same job safely.
file(GLOB_RECURSE files ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/include/*.h
     ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.h)
set(bad "")
foreach(file ${files})
  file(STRINGS ${file} lines REGEX "remove_all[ \t]*\\(")
  if(lines)
    list(APPEND bad "${file}: ${lines}")
  endif()
endforeach()
if(bad)
  string(REPLACE ";" "\n" bad "${bad}")
  message(FATAL_ERROR "std::filesystem::remove_all crashes with pip's libtorch; use sys::remove_tree:\n${bad}")
endif()
list(LENGTH files count)
message(STATUS "${count} files checked for remove_all")
