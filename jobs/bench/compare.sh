#!/usr/bin/env bash
# hpctrain against PyTorch DistributedDataParallel on this machine, taken side by side:
#   jobs/bench/compare.sh [--quick] [--pairs N] [--bin PATH] [--out DIR] [--only unet|zero]
# For each case it runs hpctrain, then the PyTorch reference (jobs/bench/ddp_reference.py under
# jobs/bench/torchrun.py) with glibc's default malloc, then the reference again with the malloc
# thresholds that make PyTorch faster on CPU (GLIBC_TUNABLES; hpctrain sets them with mallopt), and
# repeats that --pairs times (A B B' A B B' ...), so drift on the machine hits all three alike.
# Cases, every rank with one intra-op thread:
#   fashion_cnn, 2 ranks, batch 64 and batch 8 per rank (samples/s), and 1 rank at batch 64
#   (scaling efficiency = rate at 2 ranks / (2 x rate at 1 rank));
#   the gpt of configs/text_gpt.ini, 2 ranks, batch 32 (tokens/s), on Debian's licence texts;
#   fashion_cnn, 2 ranks, batch 64, with the optimizer state sharded: dist.zero_stage=1 against
#   torch.distributed.optim.ZeroRedundancyOptimizer;
#   the unet of configs/fashion_ddpm.ini (train.objective=diffusion), 2 ranks, batch 64
#   (samples/s), against its PyTorch twin on the same objective; and sampling with it: 64 images,
#   DDIM, 50 steps, guidance 2, 2 ranks (images/s), against the twin's DDIM loop.
# --only unet: the unet cases alone, and their rows; --only zero: the ZeRO stage 1 case alone, its
# rate and its peak RSS.
# Rates are taken over the steps after the first --warmup (hpctrain: its progress records after
# the first; the reference: timed from the end of that step). Peak RSS is rank 0's. Time to the
# first step: from just before the launcher starts to the end of rank 0's first optimizer step
# (fashion_cnn, batch 64, 2 ranks). Start-up file-system calls: strace -f -c -e trace=%file over
# a whole run of 2 steps of that case, launcher included, once per program. Allreduce busbw at 2
# ranks, 4 KiB to 256 MiB: `hpctrain bench comm --check-collectives false` (hpctrain's
# communicator, blocking and through its worker, and a plain MPI_Allreduce of the same memory, in
# interleaved rounds) and jobs/bench/gloo_allreduce.py (torch.distributed over gloo), timed alike, once. I/O:
# `hpctrain bench data` (the loader against a raw read(2) of the same shard files, page cache
# warm), and a checkpoint write (a 305 MB gpt checkpoint, 1 rank, the time hpctrain logs for
# writing, fsyncing and renaming it) against `dd ... conv=fsync` of as many bytes to a new file,
# alternately, 3 times each, after a `sync`.
# Writes DIR/compare.md (medians, min-max, ratios against the faster PyTorch setting),
# DIR/compare.png and DIR/busbw.png (gnuplot), and prints the tables. --quick: 3 pairs of short runs (a few
# minutes); default: 5 pairs of longer runs.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=0
only=""
pairs=""
bin=""
out=build/compare
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --pairs) pairs=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  bin=build/release/src/hpctrain
  [ -x "$bin" ] || bin=build/dev/src/hpctrain
fi
[ -x "$bin" ] || { echo "compare.sh: no hpctrain binary (jobs/build.sh release, or --bin PATH)" >&2; exit 2; }
python=/usr/bin/python3  # Debian's, which has torch
"$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' ||
  { echo "compare.sh: $python has no torch with gloo (apt-get install python3-torch)" >&2; exit 2; }
if [ $quick -eq 1 ]; then
  pairs=${pairs:-3}; cnn_steps=48; cnn_warmup=16; gpt_steps=8; gpt_warmup=2; comm_iters=5; comm_rounds=3
  unet_steps=16; unet_warmup=4; unet_images=16
else
  pairs=${pairs:-5}; cnn_steps=400; cnn_warmup=100; gpt_steps=60; gpt_warmup=15; comm_iters=20; comm_rounds=5
  unet_steps=60; unet_warmup=15; unet_images=64
fi
case "$only" in ''|unet|zero) ;; *) echo "compare.sh: --only takes unet or zero" >&2; exit 2 ;; esac
[ "$pairs" -ge 3 ] || { echo "compare.sh: --pairs must be >= 3" >&2; exit 2; }

source jobs/env.sh
mkdir -p "$out"
out=$(realpath "$out")
fashion=/usr/share/datasets/fashion-mnist
text=/usr/share/common-licenses
[ -f "$out/fashion-mnist/manifest.json" ] ||
  "$bin" prepare fashion-mnist --source "$fashion" --out "$out/fashion-mnist" > /dev/null 2>&1
[ -f "$out/text/manifest.json" ] || "$bin" prepare text --source "$text" --out "$out/text" > /dev/null 2>&1
results="$out/results.tsv"  # case, program, rate, peak RSS MiB, seconds to the first step
: > "$results"
tuned="glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=268435456"

# The mean of KEY over a run's progress records after the first, the last peak RSS, and the
# seconds from LAUNCH_NS to the first step.
steady() { "$python" -c 'import json,sys
rs=[json.loads(l) for l in open(sys.argv[1])]
r=[x for x in rs if sys.argv[2] in x][1:]
first=[x["unix_time"] for x in rs if "first_step_s" in x][0] - int(sys.argv[3]) / 1e9
print(sum(x[sys.argv[2]] for x in r)/len(r), r[-1]["peak_rss_mb"], first)' "$1" "$2" "$3"; }

# run_hpctrain CASE RANKS BATCH STEPS WARMUP CONFIG KEY [OPTIONS...]
run_hpctrain() {
  local name=$1 ranks=$2 batch=$3 steps=$4 warmup=$5 config=$6 key=$7
  shift 7
  local run="$out/runs/$name-hpctrain"
  rm -rf "$run"
  local launch_ns
  launch_ns=$(date +%s%N)
  mpirun -np "$ranks" "$bin" train --config "$config" --run.dir="$run" --train.threads=1 \
    --train.batch_size="$batch" --train.max_steps="$steps" --log.every_steps="$warmup" \
    --data.eval_split= "$@" > "$out/last-hpctrain.log" 2>&1 ||
    { tail -n 5 "$out/last-hpctrain.log" >&2; exit 1; }
  read -r rate rss first < <(steady "$run/metrics.jsonl" "$key" "$launch_ns")
  printf '%s\thpctrain\t%s\t%s\t%s\n' "$name" "$rate" "$rss" "$first" >> "$results"
}

# run_reference CASE RANKS BATCH STEPS WARMUP MALLOC(default|tuned) ARGS...
run_reference() {
  local name=$1 ranks=$2 batch=$3 steps=$4 warmup=$5 malloc=$6
  shift 6
  local env=(env HPCTRAIN_BENCH_LAUNCH_NS="$(date +%s%N)")
  [ "$malloc" = tuned ] && env+=(GLIBC_TUNABLES="$tuned")
  "${env[@]}" "$python" jobs/bench/torchrun.py --nproc_per_node="$ranks" jobs/bench/ddp_reference.py \
    --batch-size "$batch" --steps "$steps" --warmup "$warmup" "$@" > "$out/last-reference.log" 2>&1 ||
    { tail -n 5 "$out/last-reference.log" >&2; exit 1; }
  "$python" -c 'import json,sys
r=json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
print(sys.argv[2], "pytorch-" + sys.argv[3], r["rate"], r["peak_rss_mb"][0], r["first_step_s"], sep="\t")' \
    "$out/last-reference.log" "$name" "$malloc" >> "$results"
}

# cnn_case CASE RANKS BATCH [ZERO_STAGE]: hpctrain, then both references, for fashion_cnn; with
# ZERO_STAGE 1, hpctrain's dist.zero_stage=1 against ZeroRedundancyOptimizer.
cnn_case() {
  local zero=()
  [ -n "${4:-}" ] && zero=(--zero)
  run_hpctrain "$1" "$2" "$3" "$cnn_steps" "$cnn_warmup" configs/fashion_cnn.ini samples_per_s \
    --data.path="$out/fashion-mnist" --dist.zero_stage="${4:-0}"
  for malloc in default tuned; do
    run_reference "$1" "$2" "$3" "$cnn_steps" "$cnn_warmup" "$malloc" --model fashion_cnn --data "$fashion" "${zero[@]}"
  done
}
gpt_case() {
  run_hpctrain gpt 2 32 "$gpt_steps" "$gpt_warmup" configs/text_gpt.ini tokens_per_s --data.path="$out/text"
  for malloc in default tuned; do
    run_reference gpt 2 32 "$gpt_steps" "$gpt_warmup" "$malloc" --model gpt --data "$text"
  done
}

# unet_case: training, hpctrain then both references; then sampling, hpctrain then the twin.
unet_case() {
  run_hpctrain unet-b64-2r 2 64 "$unet_steps" "$unet_warmup" configs/fashion_ddpm.ini samples_per_s \
    --data.path="$out/fashion-mnist" --ckpt.save_final=true
  for malloc in default tuned; do
    run_reference unet-b64-2r 2 64 "$unet_steps" "$unet_warmup" "$malloc" --model unet --data "$fashion"
  done
  local checkpoint="$out/runs/unet-b64-2r-hpctrain/checkpoints/ckpt-$unet_steps.h5"
  mpirun -np 2 "$bin" sample --checkpoint "$checkpoint" --out "$out/runs/unet-samples" --count "$unet_images" \
    --class 3 --steps 50 --guidance 2 > "$out/last-sample.log" 2>&1 || { tail -n 5 "$out/last-sample.log" >&2; exit 1; }
  local rate
  rate=$(sed -n 's/.*guidance 2: \([0-9.]*\) images\/s;.*/\1/p' "$out/last-sample.log")
  [ -n "$rate" ] || { echo "compare.sh: no images/s in $out/last-sample.log" >&2; exit 1; }
  printf 'unet-sample\thpctrain\t%s\t0\t0\n' "$rate" >> "$results"
  for malloc in default tuned; do
    run_reference unet-sample 2 "$((unet_images / 2))" 1 0 "$malloc" --model unet --data "$fashion" --sample 50
  done
}

# The table rows of CASES (a Python literal: [(case, title, target), ...]) from $results; with
# `rss`, rank 0's peak RSS in MiB against the smaller PyTorch one (target: hpctrain <= 0.8x).
case_rows() {
  "$python" - "$results" "$1" "${2:-rate}" <<'EOF'
import ast, statistics, sys
from collections import defaultdict
rss = sys.argv[3] == "rss"
values = defaultdict(list)
for line in open(sys.argv[1]):
    case, program, rate, peak = line.split("\t")[:4]
    values[case, program].append(float(peak if rss else rate))
def cell(case, program):
    v = values[case, program]
    return f"{statistics.median(v):,.1f} ({min(v):,.1f}–{max(v):,.1f})"
for case, title, target in ast.literal_eval(sys.argv[2]):
    pick = min if rss else max
    best = pick(statistics.median(values[case, "pytorch-default"]), statistics.median(values[case, "pytorch-tuned"]))
    ratio = statistics.median(values[case, "hpctrain"]) / best
    if rss:
        title, target = title.rsplit(", ", 1)[0] + ", peak RSS of rank 0, MiB", "<= 0.8x"
    else:
        target = f">= {target}x" if target else "-"
    print(f"| {title} | {cell(case, 'hpctrain')} | {cell(case, 'pytorch-default')} | {cell(case, 'pytorch-tuned')} | "
          f"{ratio:.2f}x | {target} |")
EOF
}
unet_cases='[("unet-b64-2r", "unet (fashion_ddpm.ini), diffusion, 2 ranks, batch 64, samples/s", 1.1),
             ("unet-sample", "unet sampling, DDIM 50 steps, guidance 2, 2 ranks, images/s", None)]'

zero_cases='[("fashion_cnn-b64-2r-zero1",
              "fashion_cnn, 2 ranks, batch 64, dist.zero_stage=1 vs ZeroRedundancyOptimizer, samples/s", 1.1)]'

for pair in $(seq "$pairs"); do
  echo "pair $pair of $pairs" >&2
  [ "$only" = zero ] || unet_case
  [ "$only" != unet ] || continue
  cnn_case fashion_cnn-b64-2r-zero1 2 64 1
  [ -z "$only" ] || continue
  cnn_case fashion_cnn-b64-2r 2 64
  cnn_case fashion_cnn-b8-2r 2 8
  cnn_case fashion_cnn-b64-1r 1 64
  gpt_case
done

if [ -n "$only" ]; then
  echo "$(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $("$bin" --version | head -n 1)"
  echo "Median (min–max) of $pairs alternating runs each."
  echo
  echo "| case | hpctrain | PyTorch DDP | PyTorch DDP, tuned malloc | hpctrain / faster PyTorch | target |"
  echo "|---|---|---|---|---|---|"
  if [ "$only" = unet ]; then
    case_rows "$unet_cases" | tee "$out/compare-unet.md"
  else
    { case_rows "$zero_cases" && case_rows "$zero_cases" rss; } | tee "$out/compare-zero.md"
  fi
  exit 0
fi

# file_calls PROGRAM COMMAND...: the calls strace counts for COMMAND's whole process tree.
file_calls() {
  local program=$1
  shift
  strace -f -c -e trace=%file -o "$out/strace-$program.txt" "$@" > "$out/last-strace.log" 2>&1 ||
    { tail -n 5 "$out/last-strace.log" >&2; exit 1; }
  printf '%s\t%s\n' "$program" "$(awk '$NF == "total" { print $4 }' "$out/strace-$program.txt")" >> "$out/file-calls.tsv"
}
if command -v strace > /dev/null; then
  : > "$out/file-calls.tsv"
  rm -rf "$out/runs/strace-hpctrain"
  file_calls hpctrain mpirun -np 2 "$bin" train --config configs/fashion_cnn.ini --run.dir="$out/runs/strace-hpctrain" \
    --train.threads=1 --train.max_steps=2 --data.eval_split= --data.path="$out/fashion-mnist"
  file_calls pytorch "$python" jobs/bench/torchrun.py --nproc_per_node=2 jobs/bench/ddp_reference.py \
    --batch-size 64 --steps 2 --warmup 1 --model fashion_cnn --data "$fashion"
fi

echo "allreduce" >&2
# The transport against MPI_Allreduce and gloo, which check nothing: without dist.check_collectives'
# small allreduce per collective (jobs/bench/checked_collectives.sh measures that on its own).
mpirun -np 2 "$bin" bench comm --iters "$comm_iters" --rounds "$comm_rounds" --check-collectives false \
  > "$out/bench-comm.txt" \
  2> "$out/last-comm.log" ||
  { tail -n 5 "$out/last-comm.log" >&2; exit 1; }
"$python" jobs/bench/torchrun.py --nproc_per_node=2 jobs/bench/gloo_allreduce.py --iters "$comm_iters" \
  > "$out/gloo-allreduce.txt" 2> "$out/last-gloo.log" || { tail -n 5 "$out/last-gloo.log" >&2; exit 1; }

echo "loader and checkpoint writes" >&2
"$bin" bench data --data "$out/fashion-mnist" --repeats 3 > "$out/bench-data.txt" 2> "$out/last-data.log" ||
  { tail -n 5 "$out/last-data.log" >&2; exit 1; }
# The same bytes as the checkpoint, to a new file, synced: "N bytes ... copied, T s, ..." -> N T.
dd_write() {
  rm -f "$out/dd.bin"
  sync
  LC_ALL=C dd if=/dev/zero of="$out/dd.bin" bs=1M count="$1" conv=fsync 2>&1 | awk '/copied/ { print $1, $(NF-3) }'
  rm -f "$out/dd.bin"
}
: > "$out/ckpt-writes.tsv"  # program, bytes, seconds
for i in 1 2 3; do
  rm -rf "$out/runs/ckpt"
  sync
  mpirun -np 1 "$bin" train --config configs/text_gpt.ini --data.path="$out/text" --run.dir="$out/runs/ckpt" \
    --train.threads=1 --train.max_steps=1 --train.batch_size=2 --data.eval_split= --model.gpt_embd=512 \
    --model.gpt_layers=8 > "$out/last-ckpt.log" 2>&1 || { tail -n 5 "$out/last-ckpt.log" >&2; exit 1; }
  bytes=$(stat -c %s "$out"/runs/ckpt/checkpoints/ckpt-1.h5)
  seconds=$(sed -n 's/.*checkpoint .* written in \([0-9.]*\) s .*/\1/p' "$out/last-ckpt.log")
  [ -n "$seconds" ] || { echo "compare.sh: no 'checkpoint ... written in' line in $out/last-ckpt.log" >&2; exit 1; }
  printf 'hpctrain\t%s\t%s\n' "$bytes" "$seconds" >> "$out/ckpt-writes.tsv"
  dd_result=$(dd_write $(((bytes + 1048575) / 1048576))) || true
  [ -n "$dd_result" ] || { echo "compare.sh: dd could not write $((bytes >> 20)) MiB to $out (disk full?)" >&2; exit 1; }
  read -r dd_bytes dd_seconds <<< "$dd_result"
  printf 'dd\t%s\t%s\n' "$dd_bytes" "$dd_seconds" >> "$out/ckpt-writes.tsv"
done
rm -rf "$out/runs/ckpt"

"$python" - "$results" "$out" "$(date -u +%Y-%m-%d)" "$(lscpu | sed -n 's/^Model name: *//p')" \
  "$(nproc)" "$("$bin" --version | head -n 1)" <<'EOF'
import statistics, sys
from collections import defaultdict
results, out, day, cpu, cores, version = sys.argv[1:7]
rates, rss, first = defaultdict(list), defaultdict(list), defaultdict(list)
for line in open(results):
    case, program, rate, peak, first_step = line.split("\t")
    rates[case, program].append(float(rate))
    rss[case, program].append(float(peak))
    first[case, program].append(float(first_step))
med = {k: statistics.median(v) for k, v in rates.items()}
def cell(case, program):
    v = rates[case, program]
    return f"{med[case, program]:,.0f} ({min(v):,.0f}–{max(v):,.0f})"
cases = [("fashion_cnn-b64-2r", "fashion_cnn, 2 ranks x 1 thread, batch 64, samples/s", 1.05),
         ("fashion_cnn-b8-2r", "fashion_cnn, 2 ranks x 1 thread, batch 8, samples/s", 1.3),
         ("fashion_cnn-b64-1r", "fashion_cnn, 1 rank, batch 64, samples/s", None),
         ("gpt", "gpt (text_gpt.ini), 2 ranks, batch 32, tokens/s", None),
         ("fashion_cnn-b64-2r-zero1", "fashion_cnn, 2 ranks, batch 64, dist.zero_stage=1 vs ZeroRedundancyOptimizer, "
          "samples/s", 1.1),
         ("unet-b64-2r", "unet (fashion_ddpm.ini), diffusion, 2 ranks, batch 64, samples/s", 1.1),
         ("unet-sample", "unet sampling, DDIM 50 steps, guidance 2, 2 ranks, images/s", None)]
lines = [f"{day}, {cpu}, {cores} cores; {version}; PyTorch: Debian's python3-torch, gloo.",
         f"Median (min–max) of {len(rates['gpt', 'hpctrain'])} alternating runs each.", "",
         "| case | hpctrain | PyTorch DDP | PyTorch DDP, tuned malloc | hpctrain / faster PyTorch | target |",
         "|---|---|---|---|---|---|"]
ratios = []
for case, title, target in cases:
    best = max(med[case, "pytorch-default"], med[case, "pytorch-tuned"])
    ratio = med[case, "hpctrain"] / best
    ratios.append((case, ratio))
    lines.append(f"| {title} | {cell(case, 'hpctrain')} | {cell(case, 'pytorch-default')} | "
                 f"{cell(case, 'pytorch-tuned')} | {ratio:.2f}x | {f'>= {target}x' if target else '-'} |")
for program in ("hpctrain", "pytorch-default", "pytorch-tuned"):
    one, two = med["fashion_cnn-b64-1r", program], med["fashion_cnn-b64-2r", program]
    lines.append(f"| scaling efficiency 1 -> 2 ranks, {program} | {two / (2 * one):.1%} | | | | >= 95% |")
for program in ("hpctrain", "pytorch-default", "pytorch-tuned"):
    lines.append(f"| peak RSS of rank 0, fashion_cnn b64 2 ranks, {program} | "
                 f"{statistics.median(rss['fashion_cnn-b64-2r', program]):,.0f} MiB | | | | hpctrain <= 0.6x |")
for program in ("hpctrain", "pytorch-default", "pytorch-tuned"):
    lines.append(f"| peak RSS of rank 0, fashion_cnn b64 2 ranks, ZeRO stage 1, {program} | "
                 f"{statistics.median(rss['fashion_cnn-b64-2r-zero1', program]):,.0f} MiB | | | | hpctrain <= 0.8x |")
launch = {p: statistics.median(first["fashion_cnn-b64-2r", p]) for p in ("hpctrain", "pytorch-default", "pytorch-tuned")}
lines.append(f"| launch to the end of the first step, fashion_cnn b64 2 ranks, s | {launch['hpctrain']:.2f} | "
             f"{launch['pytorch-default']:.2f} | {launch['pytorch-tuned']:.2f} | "
             f"{launch['hpctrain'] / min(launch['pytorch-default'], launch['pytorch-tuned']):.2f}x | <= 0.6x |")
# busbw by size: bench comm's "bytes elements | block-us algbw busbw | wait-us busbw | mpi-us algbw
# busbw | check" rows, and gloo_allreduce.py's "bytes us algbw busbw".
comm = {int(f[0]): (float(f[5]), float(f[8]), float(f[12])) for f in (l.split() for l in open(f"{out}/bench-comm.txt"))
        if f and f[0].isdigit()}
gloo = {int(f[0]): float(f[3]) for f in (l.split() for l in open(f"{out}/gloo-allreduce.txt")) if f and f[0].isdigit()}
comm_lines = ["", "Allreduce (sum, float32), 2 ranks, busbw in GB/s (blocking: allreduce_blocking, on the calling "
              "thread; waited: allreduce() then wait(), through the communicator's worker thread):", "",
              "| bytes | hpctrain, blocking | hpctrain, waited | plain MPI_Allreduce | gloo (torch.distributed) | "
              "blocking / MPI | waited / MPI | target (>= 64 KiB) |",
              "|---|---|---|---|---|---|---|---|"]
for size in sorted(comm):
    blocking, waited, mpi = comm[size]
    comm_lines.append(f"| {size:,} | {blocking:.2f} | {waited:.2f} | {mpi:.2f} | {gloo.get(size, float('nan')):.2f} | "
                      f"{blocking / mpi:.2f}x | {waited / mpi:.2f}x | {'>= 0.95x' if size >= 65536 else '-'} |")
# The loader: bench data's "case samples/s MB/s raw-MB/s %-of-raw blocks min-max" rows (the case
# has spaces); each case against the raw read timed in turn with it.
io_lines = ["", "I/O, MB/s (page cache warm for the loader; checkpoint: median of 3 alternating writes):", "",
            "| case | hpctrain | reference | hpctrain / reference |", "|---|---|---|---|"]
data = {}
for l in open(f"{out}/bench-data.txt"):
    f = l.split()
    if l.startswith(("raw ", "loader ")):
        data[" ".join(f[:-6])] = (float(f[-5]), float(f[-4]))
for case in ("loader first pass", "loader sequential, 1T", "loader shuffled, 1T", "loader shuffled, 2T"):
    loader, raw = data[case]
    io_lines.append(f"| {case} (bench data) vs a raw read(2) of the shards | {loader:,.0f} | {raw:,.0f} | "
                    f"{loader / raw:.2f}x |")
writes = defaultdict(list)
for l in open(f"{out}/ckpt-writes.tsv"):
    program, size, seconds = l.split()
    writes[program].append(int(size) / float(seconds) / 1e6)
ckpt_mb = int(open(f"{out}/ckpt-writes.tsv").readline().split()[1]) / 1e6
ours, dd = statistics.median(writes["hpctrain"]), statistics.median(writes["dd"])
io_lines.append(f"| checkpoint write ({ckpt_mb:,.0f} MB, fsync, rename) vs `dd conv=fsync` | "
                f"{ours:,.0f} ({min(writes['hpctrain']):,.0f}–{max(writes['hpctrain']):,.0f}) | "
                f"{dd:,.0f} ({min(writes['dd']):,.0f}–{max(writes['dd']):,.0f}) | {ours / dd:.2f}x |")
try:
    calls = dict(line.split() for line in open(f"{out}/file-calls.tsv"))
    lines.append(f"| file-system calls (strace %file) of a 2-step run, launcher included | {int(calls['hpctrain']):,} | "
                 f"{int(calls['pytorch']):,} | | {int(calls['hpctrain']) / int(calls['pytorch']):.2f}x | <= 0.25x |")
except (OSError, KeyError, ValueError):
    lines.append("| file-system calls of a 2-step run | not measured (no strace) | | | | <= 0.25x |")
lines += comm_lines + io_lines
open(f"{out}/compare.md", "w").write("\n".join(lines) + "\n")
with open(f"{out}/busbw.dat", "w") as f:  # bytes, blocking, waited, MPI, gloo (GB/s)
    for size in sorted(comm):
        f.write(f"{size} {' '.join(str(v) for v in comm[size])} {gloo.get(size, float('nan'))}\n")
with open(f"{out}/ratios.dat", "w") as f:
    for case, ratio in ratios:
        f.write(f"{case} {ratio}\n")
print("\n".join(lines))
EOF
if command -v gnuplot > /dev/null; then
  gnuplot <<EOF
set terminal png size 900,450 noenhanced
set output "$out/compare.png"
set title "hpctrain / the faster PyTorch DDP setting (median of alternating runs)"
set style fill solid 0.6
set boxwidth 0.6
set yrange [0:*]
set grid y
set xtics noenhanced
plot "$out/ratios.dat" using 0:2:xtic(1) with boxes notitle, 1 with lines dashtype 2 title "parity"
set output "$out/busbw.png"
set title "allreduce busbw, 2 ranks on one node (GB/s)"
set style data linespoints
set logscale x 2
set format x "%.0b %BB"
set xlabel "bytes"
set key top left
set xtics auto
plot "$out/busbw.dat" using 1:2 title "hpctrain, blocking", "" using 1:3 title "hpctrain, waited", \
     "" using 1:4 title "plain MPI_Allreduce", "" using 1:5 title "gloo (torch.distributed)"
EOF
fi
