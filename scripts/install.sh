#!/usr/bin/env bash
# Creates .venv (if missing) and installs MIRAGE with its test extras.
# constraints.txt pins torch to the CPU build and keeps veRL's transformers range,
# so no dependency can pull a multi-GB CUDA torch.
# --test: also what the test suite needs outside Python: Debian's chromium, for the app's
# end-to-end tests in a real browser (tests/app/test_app_browser.py). The main job needs no
# browser, so the plain install leaves it out.
# --gpu (GPU machines only, docs/gpu.md): the same install plus the `gpu` extra (vLLM) under
# constraints-gpu.txt, which takes the CUDA build of torch (several GB of wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
CONSTRAINTS=constraints.txt
EXTRAS=test
BROWSER=no
usage="usage: bash scripts/install.sh [--test] [--gpu]"
seen=" "
for option in "$@"; do
    case "$seen" in *" $option "*) echo "error: '$option' given twice ($usage)" >&2; exit 2 ;; esac
    seen="$seen$option "
    case "$option" in
        --gpu) CONSTRAINTS=constraints-gpu.txt EXTRAS=test,gpu ;;
        --test) BROWSER=yes ;;
        *) echo "error: unknown option '$option' ($usage)" >&2; exit 2 ;;
    esac
done
# Debian's chromium downloads and unpacks in the background while pip works.
BROWSER_JOB=""
BROWSER_LOG=""
if [ "$BROWSER" = yes ] && ! command -v chromium >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "error: Debian's chromium is missing and installing it needs root (apt-get install chromium)" >&2
            exit 1
        }
        SUDO="sudo"
    fi
    echo "installing Debian's chromium for the browser tests (about a minute, beside pip)"
    BROWSER_LOG="${TMPDIR:-/tmp}/mirage-install-chromium.$$.log"
    ( $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium ) \
        >"$BROWSER_LOG" 2>&1 &
    BROWSER_JOB=$!
fi
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# --no-compile, then compileall on every core: the same bytecode pip would write one file
# at a time (imports stay fast where PYTHONDONTWRITEBYTECODE is set), in half the time.
.venv/bin/python -m pip install -q --no-compile -c "$CONSTRAINTS" -e ".[$EXTRAS]" \
    -e examples/mirage-example-filter -e examples/mirage-example-env
SITE="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# a few vendored test files are not Python 3 (pip skips them the same way): failures are not errors
[ -z "$SITE" ] || .venv/bin/python -m compileall -q -j 0 "$SITE" >/dev/null 2>&1 || true
if [ -n "$BROWSER_JOB" ]; then
    if ! wait "$BROWSER_JOB"; then
        tail -20 "$BROWSER_LOG" >&2
        echo "error: installing Debian's chromium failed (apt-get install chromium; its log is above)" >&2
        exit 1
    fi
    rm -f "$BROWSER_LOG"
fi
