#!/usr/bin/env bash
# Run nspy-mcp's GPU checks on a GPU host without network access.
#
#   tools/gpu_check.sh [WHEELHOUSE]        (default WHEELHOUSE: .whl)
#
# 1. Makes a virtual environment with the system's site packages (torch, numpy... of the
#    host stay usable), at $NSPY_GPU_VENV (default /tmp/nspy-gpu-venv), and installs
#    the wheelhouse into it with `pip install --no-index`: nothing is fetched from the
#    network. This checkout is used in place (PYTHONPATH). Build the wheelhouse elsewhere
#    with tools/build_wheelhouse.py.
# 2. Prints a short environment summary: GPU, driver, ncu, our dependencies' versions and
#    `nspy-mcp env`.
# 3. Runs `pytest -m gpu` and every numbered example (examples/NN_*.py), each under a time
#    limit (GNU timeout, which signals the whole process group).
# Exits non-zero when installing, the tests or an example fail.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELHOUSE="${1:-.whl}"
VENV="${NSPY_GPU_VENV:-/tmp/nspy-gpu-venv}"
PYTHON="${PYTHON:-python3}"
TEST_TIMEOUT_S="${NSPY_GPU_TEST_TIMEOUT_S:-1500}"
status=0

limit() {  # limit SECONDS CMD...: GNU timeout signals its whole process group on expiry
    local secs="$1"; shift
    timeout --kill-after=10 --signal=TERM "$secs" "$@"
}

echo "== install (offline) into $VENV"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV" || exit 2
fi
PY="$VENV/bin/python"
if [ -d "$WHEELHOUSE" ] && ls "$WHEELHOUSE"/*.whl >/dev/null 2>&1; then
    wheels=()
    for w in "$WHEELHOUSE"/*.whl; do
        case "$(basename "$w")" in nspy_mcp-*) ;; *) wheels+=("$w") ;; esac
    done
    limit 600 "$PY" -m pip install -q --no-index --find-links "$WHEELHOUSE" \
        --disable-pip-version-check "${wheels[@]}" || { echo "wheelhouse install failed"; exit 2; }
else
    echo "no wheels in $WHEELHOUSE: relying on what is installed"
fi
# This checkout is pure Python: import it from here rather than building it (no network,
# and the host's setuptools may lack bdist_wheel). Subprocesses inherit PYTHONPATH.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== environment"
limit 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,temperature.gpu \
    --format=csv,noheader || echo "nvidia-smi: not available"
if command -v ncu >/dev/null 2>&1 || [ -n "${NSPY_NCU:-}" ]; then
    limit 30 "${NSPY_NCU:-ncu}" --version | tail -1
else
    echo "ncu: not on PATH"
fi
limit 60 "$PY" - <<'EOF'
import importlib.metadata as md
names = ["mcp", "pydantic", "pydantic-core", "anyio", "pandas", "numpy", "ncu-report",
         "jsonschema", "nvtx", "cloudpickle", "nvidia-ml-py", "platformdirs", "cupti-python",
         "torch", "triton", "pytest"]
out = []
for n in names:
    try:
        out.append(f"{n} {md.version(n)}")
    except md.PackageNotFoundError:
        out.append(f"{n} -")
import sys
sys.stdout.write("packages: " + ", ".join(out) + "\n")
EOF
limit 300 "$PY" -m nspy_mcp env --refresh --deep || status=1

echo "== pytest -m gpu"
limit "$TEST_TIMEOUT_S" "$PY" -m pytest -m gpu -q -W error -p no:cacheprovider
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "no GPU tests collected"
elif [ "$rc" -ne 0 ]; then
    status=1
fi

if [ -d examples ]; then
    for ex in examples/[0-9][0-9]_*.py; do
        [ -e "$ex" ] || continue
        echo "== example $ex"
        limit 600 "$PY" "$ex" || { echo "example failed: $ex"; status=1; }
    done
fi

echo "== gpu_check: $([ "$status" -eq 0 ] && echo OK || echo FAILED)"
exit "$status"
