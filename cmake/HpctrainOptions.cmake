# Compile flags as INTERFACE targets, linked PRIVATE by every project target so they never leak to users.
add_library(hpctrain_options INTERFACE)
target_compile_features(hpctrain_options INTERFACE cxx_std_17)
if(HPCTRAIN_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "HPCTRAIN_FUZZ needs clang's libFuzzer: configure with the `asan` preset")
endif()
if(HPCTRAIN_SANITIZE OR HPCTRAIN_FUZZ)
  target_compile_options(hpctrain_options INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(hpctrain_options INTERFACE -fsanitize=address,undefined)
endif()
if(HPCTRAIN_FUZZ)
  # Coverage for libFuzzer in every project object; the fuzz_<target> executables add its driver.
  target_compile_options(hpctrain_options INTERFACE -fsanitize=fuzzer-no-link)
endif()

add_library(hpctrain_warnings INTERFACE)
target_compile_options(hpctrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic $<$<CXX_COMPILER_ID:GNU>:-Wshadow=local> -Wnon-virtual-dtor>)
option(HPCTRAIN_WERROR "Treat warnings in hpctrain's own code as errors" OFF)
if(HPCTRAIN_WERROR)
  target_compile_options(hpctrain_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
