#!/usr/bin/env bash
# Draws a run's curves from its metrics.jsonl into one PNG:
#   jobs/plot.sh RUN_DIR [OUT.png]          # default OUT: RUN_DIR/curves.png
# Four panels against the optimizer step: training loss (and test loss where evaluated), test
# accuracy, learning rate, and throughput (samples/s over all ranks, and the model's TFLOP/s on a
# second axis when the metrics have it). Needs gnuplot (Debian's
# gnuplot-nox, which jobs/install-deps.sh installs). Exit 2 for a usage error or a run directory
# without metrics.
set -euo pipefail

die() { echo "plot: error: $*" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: jobs/plot.sh RUN_DIR [OUT.png]"
run_dir=$1
out=${2:-$run_dir/curves.png}
metrics=$run_dir/metrics.jsonl
[ -s "$metrics" ] || die "$metrics is missing or empty (is $run_dir a run directory?)"
command -v gnuplot > /dev/null || die "gnuplot is not installed (apt-get install gnuplot-nox)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# metrics.jsonl holds flat objects of numbers: pick fields by name, one table per kind of record.
awk -v train="$work/train.dat" -v eval="$work/eval.dat" '
  function field(name,   at) {
    if (!match($0, "\"" name "\":[-+0-9.eE]+")) return "";
    at = substr($0, RSTART, RLENGTH)
    return substr(at, index(at, ":") + 1)
  }
  {
    if (field("test_loss") != "") {  # a diffusion run scores its loss alone
      acc = field("test_acc")
      print field("step"), field("test_loss"), (acc == "" ? "NaN" : acc) > eval
    }
    else if (field("loss") != "") {
      tflops = field("model_tflops")
      print field("step"), field("loss"), field("lr"), field("samples_per_s"), (tflops == "" ? "NaN" : tflops) > train
    }
  }' "$metrics"
[ -s "$work/train.dat" ] || die "$metrics has no training records"
# An empty panel that says why.
empty_panel() {
  printf 'set label "%s" at graph 0.5,0.5 center\nset xrange [0:1]\nset yrange [0:1]\nplot 2 notitle\nunset label\nset autoscale' "$1"
}
test_loss=""
if [ -s "$work/eval.dat" ]; then
  test_loss=", \"$work/eval.dat\" using 1:2 with linespoints title \"test\""
fi
if awk '$3 != "NaN" { found = 1 } END { exit !found }' "$work/eval.dat"; then
  accuracy="plot \"$work/eval.dat\" using 1:3 with linespoints title \"test_acc\""
elif [ -s "$work/eval.dat" ]; then
  accuracy=$(empty_panel "no accuracy: a diffusion model's test loss is in the loss panel")
else
  accuracy=$(empty_panel "no evaluation in this run")
fi

throughput="plot \"$work/train.dat\" using 1:4 with lines"
if awk '$5 != "NaN" { found = 1 } END { exit !found }' "$work/train.dat"; then
  throughput="set key top right
set ytics nomirror
set y2tics
set ylabel \"samples/s\"
set y2label \"model TFLOP/s\"
plot \"$work/train.dat\" using 1:4 with lines title \"samples/s\", \"\" using 1:5 axes x1y2 with lines title \"model TFLOP/s\""
fi

gnuplot <<GNUPLOT
set terminal png size 1200,800 noenhanced
set output "$out"
set multiplot layout 2,2 title "$(basename "$(realpath "$run_dir")")"
set grid
set xlabel "step"
set key top right
set title "loss"
plot "$work/train.dat" using 1:2 with lines title "train"$test_loss
set title "test accuracy"
set key bottom right
$accuracy
set title "learning rate"
set format y "%.3g"
unset key
plot "$work/train.dat" using 1:3 with lines
set format y "%g"
set title "throughput (all ranks)"
$throughput
unset multiplot
GNUPLOT
echo "plot: wrote $out"
