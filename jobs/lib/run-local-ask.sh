# shellcheck shell=bash disable=SC2154  # gpus, cores, repo: set by run-local.sh
# Sourced by jobs/run-local.sh --interactive: asks, on the terminal, for what a training run needs
# and leaves the answers in `np` and the array `run_args` (the hpctrain command and its options).
# Reads run-local.sh's `repo`, `gpus`, `cores` and `np` (its own choice, offered as the default).
# An empty answer takes the default shown in brackets; a wrong one is said and asked again; the end
# of input ends the script with exit 2.

# ask PROMPT DEFAULT: the answer (or DEFAULT) in `answer`.
ask() {
  local reply
  read -r -p "$1 [$2]: " reply || die "no answer to '$1' (end of input)"
  reply=${reply#"${reply%%[![:space:]]*}"}
  reply=${reply%"${reply##*[![:space:]]}"}
  answer=${reply:-$2}
}

# ini_value FILE SECTION KEY: the value set in FILE's [SECTION], or nothing.
ini_value() {
  awk -v section="$2" -v key="$3" '
    /^[ \t]*\[/ { current = $0; gsub(/[][ \t]/, "", current); next }
    current == section && index($0, "=") > 0 {
      name = substr($0, 1, index($0, "=") - 1); gsub(/[ \t]/, "", name)
      if (name == key) { value = substr($0, index($0, "=") + 1); gsub(/^[ \t]+|[ \t]+$/, "", value); print value; exit }
    }' "$1"
}

ask_config() {
  configs=("$repo"/configs/*.ini)
  [ -e "${configs[0]}" ] || die "no configs in $repo/configs"
  echo "configs:"
  local i
  for i in "${!configs[@]}"; do printf '  %d) %s\n' $((i + 1)) "configs/$(basename "${configs[$i]}")"; done
  while true; do
    ask "config (a number, or a path)" 1
    if [[ "$answer" =~ ^[0-9]{1,4}$ ]] && [ "$((10#$answer))" -ge 1 ] && [ "$((10#$answer))" -le ${#configs[@]} ]; then
      config=${configs[$((10#$answer - 1))]}
      return
    fi
    [ -f "$answer" ] && { config=$answer; return; }
    echo "  '$answer' is neither a number from 1 to ${#configs[@]} nor a config file"
  done
}

ask_ranks() {
  while true; do
    ask "ranks (processes; $gpus GPU(s), $cores core(s) here)" "$np"
    if is_count "$answer" && [ "$((10#$answer))" -ge 1 ]; then np=$((10#$answer)); return; fi
    echo "  '$answer' is not a positive number"
  done
}

# ask_choice PROMPT DEFAULT CHOICES...: one of CHOICES in `answer`.
ask_choice() {
  local prompt=$1 default=$2 choice list
  shift 2
  list=$(printf '%s, ' "$@")
  while true; do
    ask "$prompt (${list%, })" "$default"
    for choice in "$@"; do [ "$answer" = "$choice" ] && return; done
    echo "  '$answer' is not one of: $*"
  done
}

ask_for_run() {
  echo "run-local: $gpus GPU(s) and $cores core(s) here"
  ask_config
  ask_ranks
  run_args=(train --config "$config")
  local scaling precision
  scaling=$(ini_value "$config" optim lr_scaling)
  ask_choice "learning-rate scaling with the global batch" "${scaling:-none}" none linear sqrt
  run_args+=("--optim.lr_scaling=$answer")
  if [ "$answer" != none ] && [ -z "$(ini_value "$config" optim base_batch)" ]; then
    while true; do
      ask "the global batch optim.lr was tuned for (optim.base_batch)" "$(ini_value "$config" train batch_size)"
      is_count "$answer" && [ "$((10#$answer))" -ge 1 ] && break
      echo "  '$answer' is not a positive number"
    done
    run_args+=("--optim.base_batch=$((10#$answer))")
  fi
  precision=$(ini_value "$config" train precision)
  while true; do
    ask_choice "precision" "${precision:-fp32}" fp32 bf16 fp16
    [ "$answer" != fp16 ] || [ "$gpus" -gt 0 ] && break
    echo "  fp16 needs a GPU (none here): fp32 or bf16"
  done
  run_args+=("--train.precision=$answer")
  local dir
  dir=$(ini_value "$config" run dir)
  ask "run directory" "${dir:-runs/$(basename "$config" .ini)}"
  run_args+=("--run.dir=$answer")
}

# confirm LINE: true when the user wants LINE run.
confirm() {
  echo "run-local: $1"
  ask "run it? (y/n)" y
  [[ "$answer" =~ ^[Yy]([Ee][Ss])?$ ]]
}
