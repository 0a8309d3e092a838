# Every dependency is found here, once. Torch's own flags are warnings-heavy, so its headers are
# marked SYSTEM through the imported target; MPI/HDF5/Boost stay private to the modules that use them.
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
# A CUDA libtorch exports torch_cuda (and lists TORCH_CUDA_LIBRARIES); the CPU one does neither.
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(HPCTRAIN_TORCH_CUDA ON)
else()
  set(HPCTRAIN_TORCH_CUDA OFF)
endif()
# CUDA graphs (src/train/cuda_graph.cpp) include ATen's CUDA headers, which need the toolkit's.
set(HPCTRAIN_HAVE_CUDA_GRAPHS OFF)
if(HPCTRAIN_TORCH_CUDA AND HPCTRAIN_WITH_CUDA_GRAPHS)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(HPCTRAIN_HAVE_CUDA_GRAPHS ON)
  endif()
endif()
find_package(MPI REQUIRED COMPONENTS C)
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(WARNING "HDF5 found at ${HDF5_INCLUDE_DIRS} is serial; parallel HDF5 (libhdf5-openmpi-dev) is expected")
endif()
find_package(Boost 1.71 REQUIRED COMPONENTS program_options)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(PNG REQUIRED)  # hpctrain sample's images
# tokenizer.json's Split patterns (PCRE2) and normalizers (utf8proc): docs/building.md. Found
# by path, not pkg-config, so a relocated prefix (jobs/bench/pack-deps.sh) serves as well.
find_path(HPCTRAIN_PCRE2_INCLUDE pcre2.h REQUIRED)
find_library(HPCTRAIN_PCRE2_LIBRARY pcre2-8 REQUIRED)
add_library(hpctrain_pcre2 INTERFACE)
target_include_directories(hpctrain_pcre2 SYSTEM INTERFACE ${HPCTRAIN_PCRE2_INCLUDE})
target_link_libraries(hpctrain_pcre2 INTERFACE ${HPCTRAIN_PCRE2_LIBRARY})
find_path(HPCTRAIN_UTF8PROC_INCLUDE utf8proc.h REQUIRED)
find_library(HPCTRAIN_UTF8PROC_LIBRARY utf8proc REQUIRED)
add_library(hpctrain_utf8proc INTERFACE)
target_include_directories(hpctrain_utf8proc SYSTEM INTERFACE ${HPCTRAIN_UTF8PROC_INCLUDE})
target_link_libraries(hpctrain_utf8proc INTERFACE ${HPCTRAIN_UTF8PROC_LIBRARY})
# TensorBoard's event files (src/tensorboard/) need protobuf and protoc; a build without them
# writes no event files and says so at run time. Their module never sees libtorch's include
# directories, so a libtorch carrying protobuf headers of its own (pytorch.org's, pip's) is no
# obstacle.
find_package(Protobuf QUIET)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
  set(HPCTRAIN_HAVE_TENSORBOARD ON)
else()
  set(HPCTRAIN_HAVE_TENSORBOARD OFF)
endif()
message(STATUS "TensorBoard event files: ${HPCTRAIN_HAVE_TENSORBOARD} (protobuf and protoc)")
# For tests/clash/tensorboard_clash_test.sh: directories put before libtorch's include
# directories, standing in for the protobuf headers of another version a pip libtorch has there.
set(HPCTRAIN_TORCH_EXTRA_INCLUDE_DIRS "" CACHE STRING
    "Tests only: include directories put before libtorch's (a stand-in for a pip libtorch's own headers)")
if(HPCTRAIN_TORCH_EXTRA_INCLUDE_DIRS)
  list(PREPEND TORCH_INCLUDE_DIRS ${HPCTRAIN_TORCH_EXTRA_INCLUDE_DIRS})
endif()

# Torch's exported target carries -D_GLIBCXX_USE_CXX11_ABI and its include dirs; wrap it so the
# include dirs are SYSTEM (libtorch headers are not -Wall -Wextra clean).
add_library(hpctrain_torch INTERFACE)
target_link_libraries(hpctrain_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(hpctrain_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})

# mpi.h from C++ pulls in the deprecated C++ bindings unless told not to; we use the C API only.
add_library(hpctrain_mpi INTERFACE)
target_link_libraries(hpctrain_mpi INTERFACE MPI::MPI_C)
target_compile_definitions(hpctrain_mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

add_library(hpctrain_hdf5 INTERFACE)
target_include_directories(hpctrain_hdf5 SYSTEM INTERFACE ${HDF5_INCLUDE_DIRS})
target_link_libraries(hpctrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES} hpctrain_mpi)
target_compile_definitions(hpctrain_hdf5 INTERFACE ${HDF5_DEFINITIONS})

# CUDA + NCCL (HPCTRAIN_WITH_NCCL): when both are found, src/comm/nccl/ is compiled into the comm
# library.
set(HPCTRAIN_HAVE_NCCL OFF)
string(TOUPPER "${HPCTRAIN_WITH_NCCL}" _nccl_wanted)
if(_nccl_wanted STREQUAL "TRUE" OR _nccl_wanted STREQUAL "YES" OR _nccl_wanted STREQUAL "1")
  set(_nccl_wanted ON)
elseif(_nccl_wanted STREQUAL "FALSE" OR _nccl_wanted STREQUAL "NO" OR _nccl_wanted STREQUAL "0")
  set(_nccl_wanted OFF)
endif()
if(NOT _nccl_wanted MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "HPCTRAIN_WITH_NCCL=${HPCTRAIN_WITH_NCCL}: use AUTO, ON or OFF")
endif()
if(NOT _nccl_wanted STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
    # libnccl.so.2: the nvidia-nccl wheels ship only the versioned name.
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
    if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_major REGEX "^#define NCCL_MAJOR")
      file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_minor REGEX "^#define NCCL_MINOR")
      file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_patch REGEX "^#define NCCL_PATCH")
      string(REGEX MATCH "[0-9]+" _nccl_major "${_nccl_major}")
      string(REGEX MATCH "[0-9]+" _nccl_minor "${_nccl_minor}")
      string(REGEX MATCH "[0-9]+" _nccl_patch "${_nccl_patch}")
      set(NCCL_VERSION "${_nccl_major}.${_nccl_minor}.${_nccl_patch}")
      add_library(hpctrain_nccl INTERFACE)
      target_include_directories(hpctrain_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(hpctrain_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
      set(HPCTRAIN_HAVE_NCCL ON)
    endif()
  endif()
endif()
if(_nccl_wanted STREQUAL "ON" AND NOT HPCTRAIN_HAVE_NCCL)
  if(NOT CUDAToolkit_FOUND)
    set(_nccl_missing "the CUDA toolkit (set CUDAToolkit_ROOT, or put nvcc on PATH)")
  elseif(NOT NCCL_INCLUDE_DIR)
    set(_nccl_missing "nccl.h (set NCCL_HOME or -DNCCL_INCLUDE_DIR=...)")
  else()
    set(_nccl_missing "libnccl (set NCCL_HOME or -DNCCL_LIBRARY=...)")
  endif()
  message(FATAL_ERROR "HPCTRAIN_WITH_NCCL=ON, but ${_nccl_missing} was not found; "
                      "or configure with -DHPCTRAIN_WITH_NCCL=AUTO to build without the NCCL communicator")
endif()
