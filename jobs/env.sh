# Sourced by the job scripts: the Open MPI settings a single-node run needs.
# Root (containers, CI) needs explicit permission; ob1 starts ~10x faster than UCX on one node.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
