# Public headers must not pull in MPI, NCCL, CUDA, HDF5 or Boost: those stay inside their modules'
# .cpp files so every user of a header builds without them (docs/architecture.md, "Dependency rules").
include(${CMAKE_CURRENT_LIST_DIR}/forbidden_lines.cmake)
forbid_lines("public headers"
             "^[ \t]*#[ \t]*include[ \t]*<(mpi|nccl|cuda|cuda_runtime|hdf5|H5[A-Za-z]*|boost/)"
             "public headers include forbidden headers"
             ${INCLUDE_DIR}/*.h)
