#!/usr/bin/env bash
# Installs hpctrain's build and run dependencies from Debian 12 packages. Idempotent: installs only
# what is missing, and does nothing (not even apt-get update) when everything is present.
# Works as root or through sudo. CUDA and NCCL are optional and not installed here.
#   jobs/install-deps.sh [--sanitizers]   (--sanitizers: also clang and its sanitizer and
#                                          libFuzzer runtimes, for the asan preset)
set -euo pipefail

packages=(
  build-essential cmake git pkg-config
  libtorch-dev                       # libtorch 1.13 (CPU)
  libopenblas0-openmp                # optimized BLAS: libtorch otherwise runs on the reference BLAS
  libopenmpi-dev openmpi-bin         # MPI: launch, rendezvous, CPU gradients
  libhdf5-openmpi-dev hdf5-tools     # parallel HDF5 for datasets and checkpoints (+ h5dump)
  libboost-program-options-dev       # INI configs and command line
  libgtest-dev                       # tests
  libspdlog-dev libfmt-dev           # logging
  nlohmann-json3-dev                 # manifests and metrics
  libpcre2-dev                       # tokenizer.json's Split patterns (Unicode-aware regular expressions)
  libutf8proc-dev                    # tokenizer.json's normalizers (NFC, NFKC, ...)
  libprotobuf-dev protobuf-compiler  # TensorBoard's event files
  zlib1g-dev                         # gzipped IDX files
  libpng-dev                         # hpctrain sample's PNG images
  dataset-fashion-mnist              # the quick start's data
  slurmctld slurmd slurm-client munge libpmix-dev  # a real Slurm for the tests (srun --mpi=pmix)
  iproute2                           # network namespaces as "nodes" for the multi-node test
  gnuplot-nox                        # jobs/plot.sh: a run's curves as PNG
  tmux bsdutils                      # tests: jobs/run-local.sh --interactive in a terminal (tmux, script)
  python3-torch                      # tests: an exported state_dict loads in PyTorch (weights_only)
  python3-crcmod                     # tests: an independent CRC-32C for TensorBoard's event files
  python3-jinja2                     # tests: chat templates rendered by Jinja2 itself
)
# The tokenizer test's reference (npm's gpt-3-encoder) runs on node; npm installs it.
command -v npm >/dev/null || packages+=(nodejs npm)
if [ "${1:-}" = "--sanitizers" ]; then
  packages+=(clang libclang-rt-dev)  # the asan preset: jobs/sanitize.sh, jobs/fuzz.sh
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
