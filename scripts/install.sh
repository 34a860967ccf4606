#!/usr/bin/env bash
# Creates .venv (if missing) and installs MIRAGE with its test extras.
# constraints.txt pins torch to the CPU build and keeps veRL's transformers range,
# so no dependency can pull a multi-GB CUDA torch.
# --gpu (GPU machines only, docs/gpu.md): the same install plus the `gpu` extra (vLLM) under
# constraints-gpu.txt, which takes the CUDA build of torch (several GB of wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
CONSTRAINTS=constraints.txt
EXTRAS=test
[ $# -le 1 ] || { echo "error: too many arguments (usage: bash scripts/install.sh [--gpu])" >&2; exit 2; }
case "${1-}" in
    "") ;;
    --gpu) CONSTRAINTS=constraints-gpu.txt EXTRAS=test,gpu ;;
    *) echo "error: unknown option '$1' (usage: bash scripts/install.sh [--gpu])" >&2; exit 2 ;;
esac
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c "$CONSTRAINTS" -e ".[$EXTRAS]" -e examples/mirage-example-filter \
    -e examples/mirage-example-env
