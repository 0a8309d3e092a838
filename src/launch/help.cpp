// Top-level --help and --version text.
#include <torch/cuda.h>
#include <torch/version.h>

#include <sstream>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/version.h"
#include "hpctrain/io/h5_file.h"
#include "hpctrain/launch/commands.h"

namespace hpctrain::cli {

std::string usage() {
  std::ostringstream out;
  out << "hpctrain " << version()
      << " - data-parallel libtorch training for MPI and Slurm clusters\n\n"
         "usage:\n"
         "  hpctrain <command> [options]\n"
         "  mpirun -np N hpctrain train --config FILE [--section.key=value ...]\n"
         "  srun hpctrain train --config FILE [--section.key=value ...]\n\n"
         "commands:\n"
         "  train     train a model; every rank reads a disjoint part of each epoch\n"
         "  eval      evaluate a checkpoint on the eval split (--checkpoint FILE --config FILE)\n"
         "  generate  continue prompts with a language model (--checkpoint FILE --prompt TEXT)\n"
         "  forward   a Hugging Face model directory's logits on token ids (--model DIR --inputs FILE)\n"
         "  tokenize  a tokenizer.json's ids of texts, and their decoding (--tokenizer PATH --text TEXT)\n"
         "  sample    images from a diffusion model, as PNG files (--checkpoint FILE --out DIR)\n"
         "  prepare   import a dataset into hpctrain's HDF5 format (hpctrain prepare --help)\n"
         "  data      inspect or verify a dataset; list the samples a rank trains on\n"
         "  ckpt      inspect, verify or export a checkpoint (hpctrain ckpt --help)\n"
         "  bench     measure a part on its own (hpctrain bench data --help)\n"
         "  doctor    check ranks, GPUs, communication, run.dir and data (run it like train)\n"
         "  trace     join the ranks' timelines of log.trace_steps (hpctrain trace merge RUN_DIR)\n"
         "  docs      print generated documentation (hpctrain docs options)\n\n"
         "options:\n"
         "  -h, --help   this text; `hpctrain <command> --help` for one command\n"
         "  --version    versions of hpctrain and the libraries it was built with\n\n"
         "exit codes: 0 done, 1 internal error, 2 usage/config, 3 data, 4 checkpoint,\n"
         "            5 communication/timeout, 75 stopped on a signal after a checkpoint\n\n"
         "train and eval options (INI `[section] key = value`, or `--section.key=value`; the\n"
         "command line wins):\n"
      << config::options_help();
  return out.str();
}

std::string versions() {
  std::ostringstream out;
  const std::string nccl = comm::nccl_version();
  out << "hpctrain " << version() << "\n"
      << "libtorch " << TORCH_VERSION << " (CUDA " << (torch::cuda::is_available() ? "available" : "not available")
      << ")\n"
      << "MPI      " << comm::Bootstrap::mpi_library_version() << "\n"
      << "HDF5     " << io::hdf5_version() << (io::hdf5_is_parallel() ? " (parallel)" : " (serial)") << "\n"
      << "NCCL     " << (nccl.empty() ? "not built" : nccl) << "\n";
  return out.str();
}

}  // namespace hpctrain::cli
