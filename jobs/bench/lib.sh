# shellcheck shell=bash
# Sourced by the benchmarks in jobs/bench/ (after `cd` to the repository root):
#   bench_options SCRIPT "NAME..." "$@"   sets the variable of each `--name value` in "$@" whose
#                                         name (dashes as underscores) is a NAME; --help prints
#                                         SCRIPT's header comment; anything else is an error (exit 2)
#   bench_need_binary SCRIPT BIN          exits 2 unless BIN is an executable
#   bench_fashion_mnist BIN DIR           Debian's Fashion-MNIST prepared into DIR, unless it is there

bench_options() {
  local script=$1 names=" $2 " variable
  shift 2
  while [ $# -gt 0 ]; do
    if [ "$1" = -h ] || [ "$1" = --help ]; then
      awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$script"
      exit 0
    fi
    variable=${1#--}
    variable=${variable//-/_}
    if [[ "$1" != --* || "$names" != *" $variable "* ]]; then
      echo "$(basename "$script"): unknown argument '$1' (see --help)" >&2
      exit 2
    fi
    [ $# -ge 2 ] || { echo "$(basename "$script"): $1 needs a value (see --help)" >&2; exit 2; }
    printf -v "$variable" '%s' "$2"
    shift 2
  done
}

bench_need_binary() {
  [ -x "$2" ] || { echo "$(basename "$1"): no hpctrain binary at $2 (jobs/build.sh, or --bin PATH)" >&2; exit 2; }
}

bench_fashion_mnist() {
  [ -f "$2/manifest.json" ] ||
    "$1" prepare fashion-mnist --source /usr/share/datasets/fashion-mnist --out "$2" >/dev/null
}
