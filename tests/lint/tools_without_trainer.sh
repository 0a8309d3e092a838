#!/usr/bin/env bash
# The commands that do not train (src/tools, src/launch) link no symbol of the trainer: their
# static libraries' undefined symbols name nothing of hpctrain::train, sharding or optim.
# Usage: tools_without_trainer.sh LIBRARY... Exit 0: none does; 1: each such symbol, with its library.
set -uo pipefail
status=0
for library in "$@"; do
  found=$(nm -uC "$library" | grep -E "hpctrain::(train|sharding|optim)::" | sort -u)
  if [ -n "$found" ]; then
    echo "$library needs the trainer:"
    echo "$found"
    status=1
  fi
done
[ $status -eq 0 ] && echo "$# libraries link nothing of train, sharding or optim"
exit $status
