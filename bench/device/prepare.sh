#!/usr/bin/env bash
# Downloads the wheels that the prepared GPU run needs and the GPU machine lacks (carry.txt) into
# .devcarry/wheels/, for python $PYTHON_VERSION (3.12: the GPU machine's) on manylinux x86-64.
# Run here, with PyPI reachable, from anywhere in the repository:
#
#     bash bench/device/prepare.sh                      # for the GPU machine (cp312)
#     PYTHON_VERSION=3.11 bash bench/device/prepare.sh  # for a local check in a python 3.11 venv
#
# The folder is emptied first and then holds exactly carry.txt's wheels, nothing else. It prints
# each wheel's size and the total, and fails if a pin has no wheel or the total is over
# $LIMIT_MIB (55: what may travel beside the repository's own files within the 64 MiB limit).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON_VERSION="${PYTHON_VERSION:-3.12}"
LIMIT_MIB="${LIMIT_MIB:-55}"
DEST=.devcarry/wheels
# Any python with pip will do: pip downloads for the interpreter named below, not for itself.
PY="${PY:-python3}"

mkdir -p "$DEST"
find "$DEST" -mindepth 1 -delete
mapfile -t pins < <("$PY" bench/device/carry.py specs)
echo "prepare.sh: ${#pins[@]} wheels for cp${PYTHON_VERSION/./} into $DEST"
# Binary wheels only, none of their requirements (carry.txt names every one that is needed);
# manylinux tags up to glibc 2.28, which the GPU machine's CUDA wheels already require. One pin a
# call: a name may be pinned twice.
for pin in "${pins[@]}"; do
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$PYTHON_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --dest "$DEST" "$pin"
done
"$PY" bench/device/carry.py report "$DEST" --limit-mib "$LIMIT_MIB"
