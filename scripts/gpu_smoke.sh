#!/usr/bin/env bash
# GPU smoke check (docs/gpu.md): on a GPU machine with constraints-gpu.txt installed
# (`bash scripts/install.sh --gpu`) and local Qwen2.5-0.5B weights, prints the versions,
# runs 5 Sokoban iterations with `--backend vllm` (P x G = 8 x 16), checks the weight sync
# and the sampler/scorer agreement from the stored metrics (scripts/gpu_smoke_report.py), and
# writes timings as JSON.
#
#   bash scripts/gpu_smoke.sh [MODEL_DIR] [core run options...]
#
# MODEL_DIR (else $MIRAGE_SMOKE_MODEL) is a local checkpoint directory: nothing is downloaded.
# Extra arguments go to `core run` after the defaults (e.g. --set env.chat_template=false for
# a base model). Output: $MIRAGE_SMOKE_DIR (default runs/gpu_smoke/) holds the run store
# smoke.duckdb and timings.json. Without a GPU, vLLM or the model it stops at once with one
# line and exit code 2.
set -euo pipefail
MODEL="${MIRAGE_SMOKE_MODEL:-}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then MODEL="$1"; shift; fi  # a first argument that is no option
[ -z "$MODEL" ] || MODEL="$(realpath -m -- "$MODEL")"  # before leaving the caller's directory
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3
fail() { echo "gpu_smoke: $*" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # the weights are local; never fetch them

# One line on stderr and exit 2 when this is no GPU machine with the pins installed.
"$PYTHON" - <<'EOF' || exit 2
import importlib.util, sys
try:
    import torch
except ImportError:
    sys.exit("gpu_smoke: torch is not installed: run `bash scripts/install.sh --gpu` (docs/gpu.md)")
if not torch.cuda.is_available():
    sys.exit(f"gpu_smoke: no CUDA GPU visible to torch {torch.__version__} (CUDA build: "
             f"{torch.version.cuda or 'none'}): run it on a GPU machine after "
             "`bash scripts/install.sh --gpu` (docs/gpu.md)")
if importlib.util.find_spec("vllm") is None:
    sys.exit("gpu_smoke: vLLM is not installed: `bash scripts/install.sh --gpu` (docs/gpu.md)")
EOF
[ -n "$MODEL" ] || fail "no model: pass MODEL_DIR or set MIRAGE_SMOKE_MODEL (local Qwen2.5-0.5B weights; nothing is downloaded)"
[ -f "$MODEL/config.json" ] || fail "$MODEL holds no config.json: expected a local Hugging Face checkpoint directory"

OUT_DIR="${MIRAGE_SMOKE_DIR:-runs/gpu_smoke}"
mkdir -p "$OUT_DIR"
DB="$OUT_DIR/smoke.duckdb"
NAME="gpu-smoke-$(date +%Y%m%d-%H%M%S)"

"$PYTHON" - <<'EOF'
import importlib.metadata as metadata
import torch
names = ("torch", "vllm", "transformers", "verl", "mirage-rl")
print("versions: " + ", ".join(f"{n} {metadata.version(n)}" for n in names)
      + f", CUDA {torch.version.cuda}, GPU {torch.cuda.get_device_name(0)}")
EOF

START=$EPOCHREALTIME
# micro-batches of 16: the memory plan puts Qwen2.5-0.5B's update at 25 GiB there (145 GiB at
# the default 128), within what the engine's half of an 80 GB card leaves (`core plan`)
"$PYTHON" -m mirage run --backend vllm --model "$MODEL" --env sokoban --steps 5 \
    --prompts 8 --group-size 16 --val-every 5 --val-episodes 32 --set model.dtype=bfloat16 \
    --set algorithm.micro_batch_size=16 \
    --db "$DB" --name "$NAME" --quiet "$@"
END=$EPOCHREALTIME

# Timings and the sampler/scorer checks, read back from the store; exit 1 when a check fails.
"$PYTHON" scripts/gpu_smoke_report.py "$DB" "$NAME" "$MODEL" "$START" "$END" "$OUT_DIR/timings.json"
