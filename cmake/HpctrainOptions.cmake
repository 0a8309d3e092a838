# Compile flags as INTERFACE targets, linked PRIVATE by every project target so they never leak to users.
add_library(hpctrain_options INTERFACE)
target_compile_features(hpctrain_options INTERFACE cxx_std_17)
if(HPCTRAIN_SANITIZE)
  target_compile_options(hpctrain_options INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(hpctrain_options INTERFACE -fsanitize=address,undefined)
endif()

add_library(hpctrain_warnings INTERFACE)
target_compile_options(hpctrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor>)
option(HPCTRAIN_WERROR "Treat warnings in hpctrain's own code as errors" OFF)
if(HPCTRAIN_WERROR)
  target_compile_options(hpctrain_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
