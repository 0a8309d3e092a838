# No source or test may call std::filesystem::remove_all: the libtorch of pip's torch wheels
# exports its own copy of it, which the dynamic linker binds first and which crashes when called
# (docs/building.md). hpctrain::sys::remove_tree does the same job safely.
include(${CMAKE_CURRENT_LIST_DIR}/forbidden_lines.cmake)
forbid_lines("sources and tests" "remove_all[ \t]*\\("
             "std::filesystem::remove_all crashes with pip's libtorch; use sys::remove_tree"
             ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/include/*.h
             ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.h)
