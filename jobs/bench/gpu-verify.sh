#!/usr/bin/env bash
# Proves hpctrain's GPU path on a machine with an NVIDIA GPU and a CUDA-enabled PyTorch: builds
# hpctrain against that torch's libtorch, runs the checks below and ends with a summary table.
# CI has no GPU; run this whenever one is at hand and record the table in docs/benchmarks.md.
#
# usage: jobs/bench/gpu-verify.sh [--deps PREFIX] [--fashion-mnist DIR] [--text DIR] [--out DIR]
#                                 [--only efficiency]
#   --deps PREFIX        MPI/HDF5/Boost/spdlog/fmt/json/gtest from jobs/bench/pack-deps.sh, for a
#                        GPU machine without those development files
#   --fashion-mnist DIR  the four Fashion-MNIST IDX .gz files
#                        (default /usr/share/datasets/fashion-mnist)
#   --text DIR           a file or folder of text for the gpt runs (default /usr/share/common-licenses)
#   --out DIR            build, logs and results (default build/gpu-verify)
#   --only efficiency    instead of the checks below: the build, the optimizer and step tests, and
#                        GPT-2 small's efficiency (jobs/bench/gpu-efficiency.sh: whole bf16 steps
#                        per tensor, multi-tensor and from a CUDA graph at batches 8-32, a profile,
#                        PyTorch eager and torch.compile, the training loop with checkpoints), about
#                        5.5 minutes; the two do not fit one 10-minute call together.
#                        GPU_EFFICIENCY_CASES picks its cases for a shorter lease.
# Needs nvidia-smi, python3 with a CUDA torch, CMake >= 3.22, a C++17 compiler and the CUDA
# toolkit; NCCL from the toolkit, $NCCL_HOME, or the nvidia-nccl wheel torch depends on.
#
# Checks, each with a time limit so the whole script stays within 10 minutes:
#   configure+build, hpctrain --version, the unit, cli and mpi tests, bench comm (nccl and mpi),
#   bench step (fashion_cnn on the GPU; GPT-2 small in fp32 (TF32) and bf16, each also timed in
#   PyTorch eager by jobs/bench/torch_step.py), hpctrain doctor, bench data, fashion_cnn trained
#   on the GPU with NCCL to >= 0.85 test accuracy (its TensorBoard event file read back by
#   tests/support/read_tfevents.py), 100 steps on the GPU over the MPI backend with
#   dist.sync_bn and two loader threads, resnet20 in fp32 and in bf16 (with background
#   checkpoints), the byte-level gpt of configs/text_gpt.ini in fp32, bf16 and fp16 (with loss
#   scaling, resumed once), `hpctrain generate` from the fp32 gpt on the GPU with and without the
#   KV cache (the same greedy tokens), a TorchScript module exported by this machine's PyTorch
#   (tests/support/export_torchscript.py), the same fashion_cnn steps on the CPU for scale, and
#   the same training in PyTorch eager on the same GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

deps=""
fmnist=/usr/share/datasets/fashion-mnist
text=/usr/share/common-licenses
out=build/gpu-verify
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=$(realpath "$2"); shift 2 ;;
    --fashion-mnist) fmnist=$(realpath "$2"); shift 2 ;;
    --text) text=$(realpath "$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gpu-verify.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in ""|efficiency) ;; *) echo "gpu-verify.sh: --only takes 'efficiency', got '$only'" >&2; exit 2 ;; esac
mkdir -p "$out"
out=$(realpath "$out")
build="$out/build"
bin="$build/src/hpctrain"
summary="$out/summary.txt"
: > "$summary"

source jobs/env.sh
if [ -n "$deps" ]; then
  # shellcheck source=jobs/bench/deps-env.sh
  source jobs/bench/deps-env.sh "$deps"
fi

# One row of the summary: name, PASS/FAIL, seconds, a short result.
record() { printf '%-28s %-5s %7s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$summary"; }

# Runs "$@" with a time limit (cut to what is left of the 10 minutes), logging to
# $out/<name>.log; sets $status and $seconds.
deadline=${GPU_VERIFY_SECONDS:-590}
run_step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  [ $((deadline - SECONDS)) -lt "$limit" ] && limit=$((deadline - SECONDS))
  if [ "$limit" -le 5 ]; then
    echo "=== $name: skipped, out of time" | tee "$out/$name.log"
    status=SKIP seconds=0
    return
  fi
  echo "=== $name: $*" | tee "$out/$name.log"
  timeout --kill-after=10 "$limit" "$@" >>"$out/$name.log" 2>&1
  local rc=$?
  seconds=$((SECONDS - start))
  if [ $rc -eq 0 ]; then status=PASS; else status=FAIL; fi
  [ $rc -eq 124 ] && echo "(timed out after $limit s)" >>"$out/$name.log"
  tail -n 25 "$out/$name.log"
}

# Unbound, as jobs/run-local.sh starts a GPU rank and as torch_step.py runs: mpirun would bind a
# lone rank to one core, shared by the kernel launches, the data reader and a checkpoint writer.
launch=(mpirun -np 1 --bind-to none)
command -v mpirun >/dev/null || launch=()
# A GPU of hpctrain's peak table, on which every CUDA run must report an MFU.
known_gpu() { nvidia-smi --query-gpu=name --format=csv,noheader | grep -qE 'A100|H100|H200|B200'; }
# steady_rate METRICS [KEY]: the mean of KEY (samples_per_s) over the progress records but the first.
steady_rate() { python3 -c 'import json,sys
r=[json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if sys.argv[2] in l][1:]
print(round(sum(r)/len(r)) if r else "none")' "$1" "${2:-samples_per_s}"; }
last_value() { python3 -c 'import json,sys
r=[json.loads(l)[sys.argv[2]] for l in open(sys.argv[1]) if sys.argv[2] in l]
print(r[-1] if r else "none")' "$1" "$2"; }

# The summary table last (a device call returns the end of the output); fails if any check did.
finish() {
  echo
  echo "=== summary ($(head -n 1 "$out/machine.txt"))"
  cat "$summary"
  ! grep -qE ' (FAIL|SKIP) ' "$summary"
  exit $?
}
# shellcheck source=jobs/bench/gpu-efficiency.sh
source jobs/bench/gpu-efficiency.sh

echo "=== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/machine.txt"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_info=$(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')
echo "torch $torch_info at $torch_prefix" | tee -a "$out/machine.txt"
(nvcc --version | tail -n 1; cmake --version | head -n 1; c++ --version | head -n 1) | tee -a "$out/machine.txt"

# NCCL: the toolkit's, $NCCL_HOME's, or else the wheel's that torch itself loads.
nccl_args=()
if [ -z "${NCCL_HOME:-}" ] && ! ls /usr/local/cuda/include/nccl.h >/dev/null 2>&1; then
  nccl_dir=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
    nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* | head -n 1)
    nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_lib")
  fi
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# shellcheck disable=SC2206
deps_args=(${HPCTRAIN_DEPS_CMAKE_ARGS:-})
run_step configure 150 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}" \
  -DCMAKE_CUDA_ARCHITECTURES=native -DHPCTRAIN_WITH_NCCL=ON "${deps_args[@]}" "${nccl_args[@]}"
record configure "$status" "$seconds" "$(grep -m1 'NCCL *:' "$out/configure.log" | sed 's/^-- *//')"
[ "$status" = PASS ] || { cat "$summary"; exit 1; }

# Keep going past a failing file, so one run shows every compile error.
keep_going=(-- -k 0)
[ ${#generator[@]} -eq 0 ] && keep_going=(-- -k)
run_step build 360 cmake --build "$build" -j "$(nproc)" "${keep_going[@]}"
record build "$status" "$seconds" "$(grep -c 'error:' "$out/build.log") compile errors"
# CUDA graphs are the one part compiled against libtorch's CUDA headers only here: if that part
# fails, the rest is still measured without it.
if [ "$status" != PASS ] && grep -qE 'cuda_graph\.cpp:[0-9]+:[0-9]+: (fatal )?error' "$out/build.log"; then
  run_step build_without_graphs 240 bash -c "cmake '$build' -DHPCTRAIN_WITH_CUDA_GRAPHS=OFF >/dev/null &&
    cmake --build '$build' -j $(nproc) ${keep_going[*]}"
  record "build without CUDA graphs" "$status" "$seconds" "$(grep -c 'error:' "$out/build_without_graphs.log") compile errors"
fi
[ -x "$bin" ] || { cat "$summary"; exit 1; }

run_step version 30 "$bin" --version
record "hpctrain --version" "$status" "$seconds" "$(grep -m1 libtorch "$out/version.log")"

if [ "$only" = efficiency ]; then
  run_step tests 120 ctest --test-dir "$build" -R 'MultiTensorAdamW|^Step\.|HostStaging|PaddedRowsLinear' -j 8 \
    --timeout 100 --output-on-failure
  record "tests (optimizer, step)" "$status" "$seconds" "$(grep -m1 'tests passed' "$out/tests.log")"
  efficiency_checks
  finish
else
  run_step tests 180 ctest --test-dir "$build" -L 'unit|cli|mpi' -j 8 --timeout 120 --output-on-failure
  record "tests (unit, cli, mpi)" "$status" "$seconds" "$(grep -m1 'tests passed' "$out/tests.log")"
fi

# The largest size's row; with one rank nothing moves, so it shows the cost of a call.
largest() { grep -E '^ +[0-9]+' "$out/$1.log" | tail -n 1 |
            awk '{print $1" B: blocking "$4" us, busbw "$6" GB/s; waited "$8" us; MPI_Allreduce "$11" us"}'; }
run_step bench_comm_nccl 90 "${launch[@]}" "$bin" bench comm --backend nccl --min-bytes 4KiB --max-bytes 256MiB
record "bench comm nccl" "$status" "$seconds" "$(largest bench_comm_nccl)"
run_step bench_comm_mpi 60 "${launch[@]}" "$bin" bench comm --backend mpi --min-bytes 4KiB --max-bytes 64MiB
record "bench comm mpi" "$status" "$seconds" "$(largest bench_comm_mpi)"

run_step bench_step 90 "${launch[@]}" "$bin" bench step --model fashion_cnn --device cuda --steps 30
record "bench step fashion_cnn cuda" "$status" "$seconds" \
  "$(awk '/forward\+backward|overlap on/ {printf "%s ", $0}' "$out/bench_step.log" | tr -s ' ')"

data="$out/fashion-mnist"
rm -rf "$data" "$out/text" "$out"/run-*  # a run directory left from an earlier call would be resumed
run_step prepare 60 "$bin" prepare fashion-mnist --source "$fmnist" --out "$data"
record "prepare fashion-mnist" "$status" "$seconds" ""

run_step doctor 60 "${launch[@]}" "$bin" doctor --dist.device=cuda --data.path="$data" --run.dir="$out/run-doctor"
record "hpctrain doctor" "$status" "$seconds" "$(grep -m1 -E '^ *devices' "$out/doctor.log" | tr -s ' '); $(grep -m1 'doctor:' "$out/doctor.log")"

run_step bench_data 60 "$bin" bench data --data "$data" --repeats 3
record "bench data" "$status" "$seconds" "$(grep 'loader shuffled, 2T' "$out/bench_data.log" | awk '{print $4" samples/s shuffled, 2 threads"}')"

# samples/s of a run: the mean of its progress records after the first epoch (warm-up excluded).
rate() { python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if "samples_per_s" in l]
late=[x["samples_per_s"] for x in r if x["epoch"]>1] or [x["samples_per_s"] for x in r]
print(round(sum(late)/len(late)))' "$1"; }
accuracy() { grep -o '"test_acc":[0-9.]*' "$1" | tail -n 1 | cut -d: -f2; }

run_step train_gpu 150 "${launch[@]}" "$bin" train --config configs/fashion_cnn.ini --data.path="$data" \
  --run.dir="$out/run-gpu" --dist.device=cuda --dist.backend=nccl --train.epochs=3 --log.every_steps=100
acc=$(accuracy "$out/run-gpu/metrics.jsonl")
if [ "$status" = PASS ] && ! python3 -c "import sys; sys.exit(0 if float('${acc:-0}') >= 0.85 else 1)"; then
  status=FAIL
fi
record "train fashion_cnn gpu+nccl" "$status" "$seconds" \
  "3 epochs, test_acc $acc, $(rate "$out/run-gpu/metrics.jsonl") samples/s (epochs 2-3)"

# The GPU run's TensorBoard event file, read by the independent reader: a CUDA libtorch carries
# protobuf headers of its own, which the writer's module never sees (docs/building.md).
run_step tensorboard 30 python3 tests/support/read_tfevents.py "$out"/run-gpu/tensorboard/events.out.tfevents.*
scalars=$(python3 -c 'import json,sys; e=json.loads(open(sys.argv[1]).read().split("\n", 1)[1])[0]
print(sum(1 for x in e if "loss" in x.get("scalars", {})))' "$out/tensorboard.log" 2>/dev/null)
if [ "$status" = PASS ] && [ "${scalars:-0}" -lt 1 ]; then status=FAIL; fi
record "tensorboard event file" "$status" "$seconds" "${scalars:-0} events with a loss, every CRC checked"

# The trained model taken to PyTorch: exported as a state_dict, loaded strictly into the same
# network written in PyTorch, evaluated on the test set: the accuracy must match hpctrain's.
latest_ckpt="$out/run-gpu/checkpoints/$(cat "$out/run-gpu/checkpoints/latest" 2>/dev/null)"
run_step export 60 "$bin" ckpt export "$latest_ckpt" --to state_dict --out "$out/model.pt"
run_step load_state_dict 60 python3 jobs/bench/load_state_dict.py --state-dict "$out/model.pt" \
  --source "$fmnist" --manifest "$data/manifest.json"
torch_acc=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["test_acc"])' \
  "$out/load_state_dict.log" 2>/dev/null)
if [ "$status" = PASS ] && ! python3 -c "import sys; sys.exit(0 if abs(float('${torch_acc:-0}') - float('${acc:-1}')) < 2e-3 else 1)"; then
  status=FAIL
fi
record "state_dict in pytorch" "$status" "$seconds" "test_acc $torch_acc in PyTorch, $acc in hpctrain"

# CUDA tensors over the MPI backend (staged through host memory), with synchronized BatchNorm and
# two loader threads: it must run and keep the replicas identical.
run_step train_gpu_mpi 60 "${launch[@]}" "$bin" train --config configs/fashion_cnn.ini --data.path="$data" \
  --run.dir="$out/run-gpu-mpi" --dist.device=cuda --dist.backend=mpi --dist.sync_bn=true \
  --data.loader_threads=2 --dist.check_replicas_every=10 --train.max_steps=100 --log.every_steps=50 \
  --data.eval_split=
record "train gpu, mpi backend, sync_bn" "$status" "$seconds" "100 steps, $(rate "$out/run-gpu-mpi/metrics.jsonl") samples/s"

# resnet20 on the GPU in fp32, then with bf16 autocast: samples/s after the first progress record
# (cuDNN picks its algorithms there); the bf16 run also writes background checkpoints taken from
# CUDA tensors, which must all land.
resnet_run=(--model.name=resnet --dist.device=cuda --dist.backend=nccl --train.batch_size=128
            --train.max_steps=600 --log.every_steps=100 --data.eval_split=)
run_step train_resnet_fp32 60 "${launch[@]}" "$bin" train --config configs/fashion_cnn.ini --data.path="$data" \
  --run.dir="$out/run-resnet-fp32" "${resnet_run[@]}"
record "train resnet20 gpu fp32" "$status" "$seconds" "600 steps of 128, $(steady_rate "$out/run-resnet-fp32/metrics.jsonl") samples/s"
run_step train_resnet_bf16 60 "${launch[@]}" "$bin" train --config configs/fashion_cnn.ini --data.path="$data" \
  --run.dir="$out/run-resnet-bf16" "${resnet_run[@]}" --train.precision=bf16 --ckpt.async=true --ckpt.every_steps=200
written=$(grep -c 'written in the background' "$out/train_resnet_bf16.log")
[ "$status" = PASS ] && [ "$written" -lt 3 ] && status=FAIL
record "train resnet20 gpu bf16" "$status" "$seconds" \
  "$(steady_rate "$out/run-resnet-bf16/metrics.jsonl") samples/s, $written background checkpoints"

# The byte-level gpt (configs/text_gpt.ini, 0.8 M parameters, 64 windows of 128 tokens a step)
# in fp32 and with bf16 autocast: tokens/s after the first progress record, and the perplexity
# on the held-out 10 % of the text after 300 steps.
run_step prepare_text 60 "$bin" prepare text --source "$text" --out "$out/text"
record "prepare text" "$status" "$seconds" "$(grep -o 'train: [0-9]* samples' "$out/prepare_text.log" | sed 's/samples/tokens/')"
last_ppl() { python3 -c 'import json,sys
r=[json.loads(l)["test_ppl"] for l in open(sys.argv[1]) if "test_ppl" in l]
print(round(r[-1], 2) if r else "none")' "$1"; }
gpt_run=(--config configs/text_gpt.ini --data.path="$out/text" --dist.device=cuda --dist.backend=nccl
         --train.batch_size=64 --log.every_steps=50)
for precision in fp32 bf16 fp16; do
  run_step "train_gpt_$precision" 90 "${launch[@]}" "$bin" train "${gpt_run[@]}" --run.dir="$out/run-gpt-$precision" \
    --train.precision="$precision" --train.max_steps=300
  result="$(steady_rate "$out/run-gpt-$precision/metrics.jsonl" tokens_per_s) tokens/s, test_ppl $(last_ppl "$out/run-gpt-$precision/metrics.jsonl")"
  [ "$precision" = fp16 ] && result="$result, loss scale $(last_value "$out/run-gpt-fp16/metrics.jsonl" loss_scale), $(last_value "$out/run-gpt-fp16/metrics.jsonl" skipped_steps) skipped"
  # Every CUDA run reports its GPU's memory in use; on a GPU of hpctrain's peak table also its MFU
  # (bf16/fp16 against the half-precision peak, fp32 with train.tf32's default against TF32's).
  mfu=$(last_value "$out/run-gpt-$precision/metrics.jsonl" mfu)
  gpu_mem=$(last_value "$out/run-gpt-$precision/metrics.jsonl" gpu_mem_mb)
  result="$result, MFU $mfu, GPU memory $gpu_mem MB, $(last_value "$out/run-gpt-$precision/metrics.jsonl" model_tflops) model TFLOP/s"
  [ "$status" = PASS ] && [ "$gpu_mem" = none ] && status=FAIL
  [ "$status" = PASS ] && [ "$mfu" = none ] && known_gpu && status=FAIL
  record "train gpt gpu $precision" "$status" "$seconds" "$result"
done
# fp16 resumed from its checkpoint at step 300 for 50 more steps: the loss scaler's count of skipped
# steps must carry on from the checkpoint, not start again at 0.
skipped_before=$(last_value "$out/run-gpt-fp16/metrics.jsonl" skipped_steps)
run_step resume_gpt_fp16 60 "${launch[@]}" "$bin" train "${gpt_run[@]}" --run.dir="$out/run-gpt-fp16" \
  --train.precision=fp16 --train.max_steps=350
skipped_after=$(last_value "$out/run-gpt-fp16/metrics.jsonl" skipped_steps)
if [ "$status" = PASS ] && ! grep -q 'resumed from' "$out/resume_gpt_fp16.log"; then status=FAIL; fi
if [ "$status" = PASS ] && ! python3 -c "import sys; sys.exit(0 if int('$skipped_after') >= int('$skipped_before') else 1)" 2>/dev/null; then
  status=FAIL
fi
record "resume gpt gpu fp16" "$status" "$seconds" "skipped steps $skipped_before at step 300, $skipped_after at 350"

# Generation on the GPU from the fp32 gpt's checkpoint (its config says dist.device=cuda): greedy
# with the KV cache and without must give the same tokens.
latest_gpt="$out/run-gpt-fp32/checkpoints/$(cat "$out/run-gpt-fp32/checkpoints/latest" 2>/dev/null)"
jsonl_field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2" 2>/dev/null; }
for cache in kv_cache no_cache; do
  flags=()
  [ "$cache" = no_cache ] && flags=(--no-kv-cache)
  run_step "generate_gpu_$cache" 60 "$bin" generate --checkpoint "$latest_gpt" --prompt "The " --max-new-tokens 64 \
    --temperature 0 "${flags[@]}" --out "$out/generate_$cache.jsonl"
  record "generate gpt gpu ($cache)" "$status" "$seconds" "$(jsonl_field "$out/generate_$cache.jsonl" tokens_per_s) tokens/s"
done
if [ "$(jsonl_field "$out/generate_kv_cache.jsonl" tokens)" = "$(jsonl_field "$out/generate_no_cache.jsonl" tokens)" ] &&
   [ -n "$(jsonl_field "$out/generate_kv_cache.jsonl" tokens)" ]; then
  record "generate gpu: cache = no cache" PASS 0 "64 greedy tokens alike"
else
  record "generate gpu: cache = no cache" FAIL 0 "the greedy tokens differ, or a run failed"
fi

# GPT-2 small (124 M parameters, 8 windows of 1,024 tokens) in hpctrain and in PyTorch eager
# (jobs/bench/torch_step.py): the same forward+backward, timed the same way, so the ratio is what
# hpctrain adds or saves; MFU against the GPU's peak for the precision (TF32 for fp32). Both must
# count the same parameters, and on a GPU of the peak table hpctrain must report an MFU.
for precision in fp32 bf16; do
  name="bench_step_gpt_$precision"
  run_step "$name" 120 "${launch[@]}" "$bin" bench step --model gpt --device cuda --precision "$precision" --steps 20
  ours_status=$status ours_seconds=$seconds
  # The forward+backward row: case, ms, samples/s, tokens/s, TFLOP/s per device, MFU, min and max ms.
  ours_ms="" ours_tokens="" ours_tflops="" ours_mfu=""
  read -r _ ours_ms _ ours_tokens ours_tflops ours_mfu _ < <(grep '^forward+backward' "$out/$name.log")
  ours_parameters=$(grep -o '[0-9]* parameters' "$out/$name.log" | head -n 1 | cut -d' ' -f1)
  run_step "torch_step_gpt_$precision" 150 python3 jobs/bench/torch_step.py --device cuda --precision "$precision" --steps 20
  theirs=$(grep '^{' "$out/torch_step_gpt_$precision.log" | tail -n 1)
  theirs_ms=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["forward_backward_ms"])' "$theirs" 2>/dev/null)
  theirs_parameters=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["parameters"])' "$theirs" 2>/dev/null)
  [ "$ours_status" = PASS ] || status=$ours_status  # FAIL, or SKIP when out of time
  [ "$status" = PASS ] && [ "$ours_parameters" != "$theirs_parameters" ] && status=FAIL
  [ "$status" = PASS ] && [ "${ours_mfu:--}" = - ] && known_gpu && status=FAIL
  ratio=$(python3 -c 'import sys; print(round(float(sys.argv[2]) / float(sys.argv[1]), 3))' "$ours_ms" "$theirs_ms" 2>/dev/null)
  record "bench step gpt2-small $precision" "$status" "$((ours_seconds + seconds))" \
    "hpctrain ${ours_ms} ms, ${ours_tokens} tokens/s, ${ours_tflops} TFLOP/s, MFU ${ours_mfu}; PyTorch eager ${theirs_ms} ms (hpctrain ${ratio}x its speed); ${ours_parameters}/${theirs_parameters} parameters"
done

# A module scripted by this machine's PyTorch (model.name=torchscript): its parameters moved to the
# GPU through hpctrain's mirror of them, trained, and its test accuracy after 300 steps.
run_step export_torchscript 60 python3 tests/support/export_torchscript.py "$out/scripted.pt"
run_step train_torchscript 60 "${launch[@]}" "$bin" train --config configs/fashion_cnn.ini --data.path="$data" \
  --run.dir="$out/run-torchscript" --model.name=torchscript --model.path="$out/scripted.pt" --dist.device=cuda \
  --dist.backend=nccl --train.max_steps=300 --log.every_steps=100
[ -f "$out/scripted.pt" ] || status=FAIL
record "train torchscript gpu" "$status" "$seconds" \
  "300 steps, $(rate "$out/run-torchscript/metrics.jsonl") samples/s, $(grep -o 'test_acc [0-9.]*' "$out/train_torchscript.log" | tail -n 1)"

run_step train_cpu 60 "${launch[@]}" "$bin" train --config configs/fashion_cnn.ini --data.path="$data" \
  --run.dir="$out/run-cpu" --dist.device=cpu --train.max_steps=300 --log.every_steps=100
record "train fashion_cnn cpu" "$status" "$seconds" "300 steps, $(rate "$out/run-cpu/metrics.jsonl") samples/s"

run_step torch_reference 150 python3 jobs/bench/torch_reference.py --source "$fmnist" --epochs 3 --device cuda
ref=$(tail -n 1 "$out/torch_reference.log")
record "pytorch eager reference" "$status" "$seconds" \
  "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["samples_per_s_after_warmup"], "samples/s (epochs 2-3), test_acc", r["test_acc"])' "$ref" 2>/dev/null)"

finish
