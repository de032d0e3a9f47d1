#!/usr/bin/env bash
# The prepared GPU run, on the GPU machine, from the repository root, with `.devcarry` carried:
#
#     bash bench/device/run.sh                 # GPU mode; results under $OUT
#     bash bench/device/run.sh --cpu           # the same steps at tiny sizes on the CPU
#     bash bench/device/run.sh --smollm2 PATH  # any other gpu_run.py flag passes through (paths
#                                              # absolute: gpu_run.py runs in an empty folder)
#
# 1. Installs the carried wheels (.devcarry/wheels, from prepare.sh) that this python lacks, and
#    jaxeval from this tree, into /tmp/jaxeval-gpu-site (emptied first, then put first on
#    PYTHONPATH; $CARRY_SITE to change), with no network and no change to the installed
#    packages (jax, torch, transformers stay as they are). A missing or unusable wheel stops
#    here, before any step, with the reason (carry.py).
# 2. Imports every module gpu_run.py needs and reports any that fails (the run goes on: each step
#    then fails on its own).
# 3. Runs gpu_run.py under `timeout`, with its --budget cut so that the whole script ends within
#    $RUN_LIMIT_S (470 s in GPU mode, 1800 s with --cpu).
#
# Leaves in $OUT (default out/gpu_run): run.log (all of this output), gpu_run.json, gpu_run.txt
# (the tables) and logs.tar.gz (every step's log). Exit status: gpu_run.py's, else 2 when the
# install failed, 3 when a module failed to import.
set -uo pipefail
cd "$(dirname "$0")/../.."

PY="${PY:-python3}"
SITE="${CARRY_SITE:-/tmp/jaxeval-gpu-site}"
WHEELS="${CARRY_WHEELS:-.devcarry/wheels}"
OUT="${OUT:-out/gpu_run}"
cpu=0
for arg in "$@"; do [ "$arg" = --cpu ] && cpu=1; done
RUN_LIMIT_S="${RUN_LIMIT_S:-$([ "$cpu" = 1 ] && echo 1800 || echo 470)}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
REPO="$PWD"

# After a kill: the tables from gpu_run.json, and the step logs as gpu_run.py bundles them.
salvage() {
  if [ -f "$OUT/gpu_run.json" ] && [ ! -f "$OUT/gpu_run.txt" ]; then
    (cd "$REPO/bench/device" && "$PY" -c 'import json, sys; from table import render
print(render(json.load(open(sys.argv[1]))))' "$OUT/gpu_run.json") | tee "$OUT/gpu_run.txt"
  fi
  local work=/tmp/jaxeval-gpu-run  # gpu_run.py's --work
  if [ -d "$work" ] && [ ! -f "$OUT/logs.tar.gz" ]; then
    (cd "$work" && find . -type f -size -4M -not -path '*jaxeval-cache*' \( -name '*.log' \
      -o -name '*.txt' -o -name '*.json' -o -name '*.jsonl' \) | tar czf "$OUT/logs.tar.gz" -T -)
  fi
}

main() {
  local start=$SECONDS
  echo "run.sh: $(date -u +%FT%TZ) on $(hostname), $($PY --version 2>&1) at $(command -v "$PY")," \
    "limit ${RUN_LIMIT_S} s, out $OUT"

  # 1. the carried wheels and jaxeval
  rm -rf "$SITE"
  if ! "$PY" bench/device/carry.py install "$WHEELS" --target "$SITE"; then
    echo "run.sh: FAILED: the carried wheels could not be installed (above); nothing was run."
    return 2
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  echo "run.sh: installed in $((SECONDS - start)) s"
  # From an empty folder: `python -m jaxeval` (speed.py) puts the working directory first on
  # sys.path, and the tree's own jaxeval/ lacks jaxeval.kernels and .tasks (mapped by setup.py).
  cd "$(mktemp -d /tmp/jaxeval-gpu-cwd.XXXXXX)" || return 2

  # 2. what gpu_run.py imports
  local imports=0
  if ! "$PY" "$REPO/bench/device/carry.py" check; then
    imports=3
    echo "run.sh: WARNING: some modules do not import (above); the steps that need them will fail."
  fi

  # 3. gpu_run.py: its budget ends 40 s before the limit (the tables, the log bundle, a margin)
  local left=$((RUN_LIMIT_S - (SECONDS - start)))
  local budget=$((left - 40)) default=$([ "$cpu" = 1 ] && echo 1500 || echo 430)
  [ "$budget" -gt "$default" ] && budget=$default
  local extra=(--budget "$budget")
  for arg in "$@"; do [ "$arg" = --budget ] && extra=(); done
  echo "run.sh: gpu_run.py, budget ${budget} s, killed after $((left - 5)) s"
  timeout --kill-after=10 $((left - 5)) \
    "$PY" "$REPO/bench/device/gpu_run.py" --out "$OUT" "${extra[@]}" "$@"
  local rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "run.sh: FAILED: gpu_run.py ran past its $((left - 5)) s and was killed;" \
      "gpu_run.json holds the steps that finished"
    salvage
  fi
  echo "run.sh: done in $((SECONDS - start)) s, gpu_run.py exit $rc; in $OUT:" \
    "$(cd "$OUT" && ls | tr '\n' ' ')"
  [ "$rc" = 0 ] && rc=$imports
  return "$rc"
}

main "$@" 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
