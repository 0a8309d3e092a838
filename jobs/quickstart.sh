#!/usr/bin/env bash
# From a fresh Debian 12 machine to a trained model: installs dependencies, builds, imports
# Fashion-MNIST to HDF5, trains fashion_cnn for one epoch on 2 ranks, prints the test accuracy
# and the run directory.
set -euo pipefail
cd "$(dirname "$0")/.."
source jobs/env.sh

bash jobs/install-deps.sh
bash jobs/build.sh release
bin=build/release/src/hpctrain

if [ ! -f data/fashion-mnist/manifest.json ]; then
  "$bin" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out data/fashion-mnist
fi
run_dir="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
mpirun --oversubscribe -np 2 "$bin" train --config configs/fashion_cnn.ini --run.dir="$run_dir"

accuracy=$(grep -o '"test_acc":[0-9.]*' "$run_dir/metrics.jsonl" | tail -n 1 | cut -d: -f2)
echo
echo "test accuracy: $accuracy"
echo "run directory: $run_dir"
