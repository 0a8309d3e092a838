# <torch/torch.h> precompiled once (hpctrain_torch_pch) and reused by the sources that include it:
# its parsing is about 9 s of the 20 s such a source takes to compile at -O3, and about 45 of them
# build on every clean build. A source that does not include it directly skips the precompiled
# header, since loading the 500 MB header costs about 5 s. HPCTRAIN_PCH=OFF builds without it.
option(HPCTRAIN_PCH "Precompile <torch/torch.h> for the sources that include it" ON)
# Even with the precompiled header, a small source that includes <torch/torch.h> takes about 11 s,
# most of it loading the header and instantiating the same templates again. Compiling such sources
# a few at a time as one (CMake's unity build) pays that once per batch. Sources without torch are
# cheap and stay on their own. HPCTRAIN_UNITY=OFF (the dev preset) rebuilds one file per edit.
option(HPCTRAIN_UNITY "Compile the sources that include <torch/torch.h> in batches" ON)
set(HPCTRAIN_UNITY_BATCH 6 CACHE STRING "Sources per batch when HPCTRAIN_UNITY is ON")

if(HPCTRAIN_PCH)
  file(WRITE ${CMAKE_BINARY_DIR}/hpctrain_torch_pch.cpp "// The precompiled header's own object.\n")
  add_library(hpctrain_torch_pch STATIC ${CMAKE_BINARY_DIR}/hpctrain_torch_pch.cpp)
  # What the modules link, so the header is compiled with the same definitions as they are.
  target_link_libraries(hpctrain_torch_pch PRIVATE hpctrain_torch spdlog::spdlog fmt::fmt hpctrain_options
                                                   hpctrain_warnings)
  target_precompile_headers(hpctrain_torch_pch PRIVATE <torch/torch.h>)
endif()

# Gives `target`'s sources that include <torch/torch.h> the precompiled header; call it in the
# directory that defines `target` (source properties are per directory).
function(hpctrain_use_torch_pch target)
  if(NOT HPCTRAIN_PCH)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(uses_torch FALSE)
  foreach(source ${sources})
    if(NOT source MATCHES "\\.cpp$")
      continue()
    endif()
    if(NOT IS_ABSOLUTE ${source})
      set(source ${source_dir}/${source})
    endif()
    file(STRINGS ${source} includes REGEX "^#include <(torch|ATen|c10)/")
    if(includes)
      set(uses_torch TRUE)
    else()
      set_source_files_properties(${source} PROPERTIES SKIP_PRECOMPILE_HEADERS ON
                                                       SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
  if(uses_torch)
    target_precompile_headers(${target} REUSE_FROM hpctrain_torch_pch)
    if(HPCTRAIN_UNITY)
      set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${HPCTRAIN_UNITY_BATCH})
    endif()
  endif()
endfunction()
