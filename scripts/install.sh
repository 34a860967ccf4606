#!/usr/bin/env bash
# Creates .venv (if missing) and installs MIRAGE with its test extras.
# constraints.txt pins torch to the CPU build and keeps veRL's transformers range,
# so no dependency can pull a multi-GB CUDA torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test]" -e examples/mirage-example-filter \
    -e examples/mirage-example-env
