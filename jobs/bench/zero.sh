#!/usr/bin/env bash
# Sharded data parallelism (dist.zero_stage) against replicated training, measured in one run:
#   jobs/bench/zero.sh [--pairs 5] [--np 4] [--bin PATH] [-- BENCH_STEP_FLAGS...]
# Runs `hpctrain bench step --zero-stage S` for S = 0, 1, 2, 3, one process group per stage, in
# turn and in alternating order (0 1 2 3, 3 2 1 0, ...) --pairs times, so drift on the machine hits
# every stage alike. Each run reports the median optimizer step time (slowest rank) and the
# growth of peak RSS over the RSS before the model was built (largest rank). Prints, per stage,
# the medians over the pairs and their ratios to stage 0. Default model: a gpt of 12 layers x 768
# with a 256-token vocabulary (85 M parameters), AdamW, float32, batch 1 of 64 tokens per rank.
set -euo pipefail
cd "$(dirname "$0")/../.."

pairs=5
np=4
bin=build/release/src/hpctrain
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "zero.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
flags=("$@")
if [ ${#flags[@]} -eq 0 ]; then
  flags=(--model gpt --layers 12 --heads 12 --embd 768 --vocab 256 --block-size 64 --batch-size 1 --steps 3)
fi
[ -x "$bin" ] || { echo "zero.sh: no hpctrain binary at $bin (jobs/build.sh, or --bin PATH)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((p = 0; p < pairs; p++)); do
  order="0 1 2 3"
  [ $((p % 2)) -eq 1 ] && order="3 2 1 0"
  for stage in $order; do
    out=$(mpirun --oversubscribe -np "$np" "$bin" bench step "${flags[@]}" --zero-stage "$stage")
    ms=$(awk '/^optimizer step ms/ { print $4 }' <<<"$out")
    growth=$(awk '/^peak RSS growth MiB/ { print $5 }' <<<"$out")
    held=$(grep '^held MiB per rank' <<<"$out" | cut -d: -f2)
    echo "$stage $ms $growth $held" >>"$results"
    echo "pair $((p + 1)) stage $stage: step $ms ms, peak RSS growth $growth MiB, held:$held" >&2
  done
done
echo "# zero.sh: $np ranks, ${flags[*]}; medians of $pairs runs per stage"
awk '
  { ms[$1] = ms[$1] " " $2; rss[$1] = rss[$1] " " $3 }
  function median(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  END {
    printf "%-6s %12s %10s %18s %10s\n", "stage", "step ms", "x stage 0", "peak RSS growth", "x stage 0"
    for (s = 0; s <= 3; s++) {
      m = median(ms[s]); r = median(rss[s])
      if (s == 0) { m0 = m; r0 = r }
      printf "%-6d %12.1f %10.3f %14.1f MiB %10.3f\n", s, m, m / m0, r, r / r0
    }
  }' "$results"
