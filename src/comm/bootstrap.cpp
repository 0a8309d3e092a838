#include "hpctrain/comm/bootstrap.h"

#include <cstdlib>
#include <exception>

#include "bootstrap_impl.h"
#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "mpi_check.h"
#include "mpi_control_plane.h"
#include "rank_watch.h"

namespace hpctrain::comm {
namespace {

int g_world_size = 0;

}  // namespace

Bootstrap::Bootstrap(int* argc, char*** argv) : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Note [No lock files]: Open MPI's MPI-IO (OMPIO) picks a shared-file-pointer component when a
    // file is opened, and its `lockedfile` one creates FILE-<job>-<pid>.lock beside the file: in
    // the dataset directory when data.io=mpio reads a shard. hpctrain never uses shared file
    // pointers, and that file is left behind by a killed job, cannot be made in a read-only
    // directory, and across two GlusterFS clients failed to open and left the job hung
    // (docs/benchmarks.md, "data.io on a network file system"). So it is left out, unless the
    // user's environment says otherwise. Other MPIs ignore the variable.
    ::setenv("OMPI_MCA_sharedfp", "^lockedfile", /*overwrite=*/0);
    // Note [Thread level]: gradients are reduced from a communication thread while the training
    // thread runs backward or the control plane, and the rank watch's thread sends heartbeats
    // meanwhile: MULTIPLE. An MPI without it still trains (its calls there are serialized by
    // design), without the watch.
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &impl_->thread_level) != MPI_SUCCESS) {
      throw CommError("MPI_Init_thread failed: MPI could not start (check the launcher)");
    }
    impl_->owns_mpi = true;
  } else {
    MPI_Query_thread(&impl_->thread_level);
  }
  HT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->world));
  // Errors come back as return codes, which HT_MPI_CHECK turns into typed exceptions.
  HT_MPI_CHECK(MPI_Comm_set_errhandler(impl_->world, MPI_ERRORS_RETURN));
  HT_MPI_CHECK(MPI_Comm_rank(impl_->world, &topology_.world_rank));
  HT_MPI_CHECK(MPI_Comm_size(impl_->world, &topology_.world_size));

  HT_MPI_CHECK(MPI_Comm_split_type(impl_->world, MPI_COMM_TYPE_SHARED, topology_.world_rank,
                                   MPI_INFO_NULL, &impl_->local));
  HT_MPI_CHECK(MPI_Comm_rank(impl_->local, &topology_.local_rank));
  HT_MPI_CHECK(MPI_Comm_size(impl_->local, &topology_.local_size));

  // Node index: the node leaders (local rank 0) number themselves, then tell their node.
  MPI_Comm leaders = MPI_COMM_NULL;
  const int color = topology_.local_rank == 0 ? 0 : MPI_UNDEFINED;
  HT_MPI_CHECK(MPI_Comm_split(impl_->world, color, topology_.world_rank, &leaders));
  int node[2] = {0, 1};
  if (leaders != MPI_COMM_NULL) {
    HT_MPI_CHECK(MPI_Comm_rank(leaders, &node[0]));
    HT_MPI_CHECK(MPI_Comm_size(leaders, &node[1]));
    HT_MPI_CHECK(MPI_Comm_free(&leaders));
  }
  HT_MPI_CHECK(MPI_Bcast(node, 2, MPI_INT, 0, impl_->local));
  topology_.node_rank = node[0];
  topology_.node_count = node[1];
  topology_.hosts = allgather_string(sys::host_name());
  g_world_size = topology_.world_size;
}

Bootstrap::Impl::~Impl() = default;

Bootstrap::~Bootstrap() {
  impl_->watch.reset();  // says goodbye to the next rank, unless an exception unwinds
  if (std::uncaught_exceptions() > 0) return;  // Note [Unwinding]: main() aborts the job
  if (impl_->local != MPI_COMM_NULL) MPI_Comm_free(&impl_->local);
  if (impl_->world != MPI_COMM_NULL) MPI_Comm_free(&impl_->world);
  if (impl_->owns_mpi) MPI_Finalize();
  g_world_size = 0;
}

void Bootstrap::watch_ranks(double timeout_s) {
  if (topology_.world_size == 1 || impl_->watch) return;
  if (impl_->thread_level < MPI_THREAD_MULTIPLE) {
    if (topology_.world_rank == 0) {
      log::warn("MPI provides no MPI_THREAD_MULTIPLE: no rank watch, so a rank that dies or freezes is "
                "found only by a collective's timeout (dist.timeout_s), without its name");
    }
    return;
  }
  impl_->watch = std::make_unique<RankWatch>(impl_->world, topology_, timeout_s);
}

bool Bootstrap::watching_ranks() const { return impl_->watch != nullptr; }

bool Bootstrap::thread_multiple() const { return impl_->thread_level >= MPI_THREAD_MULTIPLE; }

void Bootstrap::barrier() const { mpi_plane::barrier(impl_->world, true); }

void Bootstrap::broadcast_bytes(std::vector<std::uint8_t>& bytes, int root) const {
  mpi_plane::broadcast_bytes(impl_->world, bytes, root, true);
}

std::vector<std::string> Bootstrap::allgather_string(const std::string& value) const {
  return mpi_plane::allgather_string(impl_->world, value, true);
}

bool Bootstrap::all_true(bool flag) const {
  const flight::Blocking recorded("allreduce (control)", sizeof(int), "int");
  int mine = flag ? 1 : 0;
  int all = 0;
  HT_MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, impl_->world));
  return all != 0;
}

void Bootstrap::allreduce_sum(float* values, std::int64_t count) const {
  mpi_plane::allreduce_sum(impl_->world, values, count, true);
}

std::unique_ptr<ControlPlane> Bootstrap::duplicate() const {
  if (impl_->thread_level < MPI_THREAD_MULTIPLE) return nullptr;  // Note [Thread level]
  MPI_Comm comm = MPI_COMM_NULL;
  HT_MPI_CHECK(MPI_Comm_dup(impl_->world, &comm));
  HT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return std::make_unique<MpiControlPlane>(comm);
}

void Bootstrap::abort_job(int exit_code) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int Bootstrap::running_world_size() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized ? g_world_size : 0;
}

void Bootstrap::finalize_if_running() {
  if (running_world_size() > 0) MPI_Finalize();
}

std::string Bootstrap::mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<size_t>(length));
  const auto end = version.find_first_of(",\n");  // Open MPI appends the build and a URL
  return version.substr(0, end);
}

int Bootstrap::launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(var)) return std::atoi(value);
  }
  return 0;
}

int Bootstrap::launcher_world_size() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(var)) return std::atoi(value);
  }
  if (std::getenv("SLURM_STEP_ID") != nullptr) {
    if (const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS")) return std::atoi(tasks);
  }
  return 0;
}

}  // namespace hpctrain::comm
