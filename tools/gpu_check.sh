#!/usr/bin/env bash
# Run nspy-mcp's GPU checks on a GPU host without network access.
#
#   tools/gpu_check.sh [WHEELHOUSE]        (default WHEELHOUSE: .whl)
#
# 1. Installs the wheelhouse with `pip install --no-index` (nothing is fetched from the
#    network) into a target directory put on PYTHONPATH ($NSPY_GPU_SITE, default
#    /tmp/nspy-gpu-site), or into a venv with system site packages if $NSPY_GPU_VENV is set. This checkout is used in place (PYTHONPATH). Build the wheelhouse elsewhere
#    with tools/build_wheelhouse.py.
# 2. Prints a short environment summary: GPU, driver, ncu, our dependencies' versions and
#    `nspy-mcp env`.
# 3. Runs `pytest -m gpu` (GPU tests and GPU examples) and the softmax benchmark, each under
#    a time limit (GNU timeout, which signals the whole process group).
# With NSPY_GPU_SETUP_ONLY=1, only step 1 (tools/gpu_verify.sh sources it that way).
# Exits non-zero when installing, the tests or an example fail.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELHOUSE="${1:-.whl}"
VENV="${NSPY_GPU_VENV:-}"
SITE="${NSPY_GPU_SITE:-/tmp/nspy-gpu-site}"
PYTHON="${PYTHON:-python3}"
TEST_TIMEOUT_S="${NSPY_GPU_TEST_TIMEOUT_S:-1500}"
status=0

limit() {  # limit SECONDS CMD...: GNU timeout signals its whole process group on expiry
    local secs="$1"; shift
    timeout --kill-after=10 --signal=TERM "$secs" "$@"
}

wheels=()
if [ -d "$WHEELHOUSE" ] && ls "$WHEELHOUSE"/*.whl >/dev/null 2>&1; then
    for w in "$WHEELHOUSE"/*.whl; do
        case "$(basename "$w")" in nspy_mcp-*) ;; *) wheels+=("$w") ;; esac
    done
else
    echo "no wheels in $WHEELHOUSE: relying on what is installed"
fi
if [ -n "$VENV" ]; then
    # A venv whose "system" packages are the interpreter's own. Where python3 is itself a
    # venv (the H200 image's /opt/torch/.venv), its packages would be lost: use --target.
    echo "== install (offline) into venv $VENV"
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv --system-site-packages "$VENV" || exit 2
    PY="$VENV/bin/python"
    if [ "${#wheels[@]}" -gt 0 ]; then
        limit 600 "$PY" -m pip install -q --no-index --find-links "$WHEELHOUSE" \
            --disable-pip-version-check "${wheels[@]}" || { echo "wheelhouse install failed"; exit 2; }
    fi
else
    # Default: the wheels go to a target directory put first on PYTHONPATH; the host's own
    # packages (torch, triton, numpy...) stay where they are. The wheelhouse holds exactly
    # one version of each missing package (tools/build_wheelhouse.py --only-missing).
    echo "== install (offline) into $SITE"
    PY="$PYTHON"
    if [ "${#wheels[@]}" -gt 0 ]; then
        limit 600 "$PY" -m pip install -q --no-index --no-deps --upgrade \
            --disable-pip-version-check --target "$SITE" "${wheels[@]}" \
            || { echo "wheelhouse install failed"; exit 2; }
    fi
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
# This checkout is pure Python: import it from here rather than building it (no network,
# and the host's setuptools may lack bdist_wheel). Subprocesses inherit PYTHONPATH.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# Bytecode for the checkout, as an installed package has it. Some GPU images set
# PYTHONDONTWRITEBYTECODE=1 (the H200 image does): without this every job process would
# compile our modules from source (import nsight_core.contestant.core 0.53 s instead of 0.30 s
# there), and the benchmark would time that instead of the product.
limit 120 "$PY" -m compileall -q -j 0 nsight_core nspy_mcp tools examples tests >/dev/null \
    || echo "compileall failed: job processes will compile from source"

if [ -n "${NSPY_GPU_SETUP_ONLY:-}" ]; then  # sourced by tools/gpu_verify.sh: PY and PYTHONPATH set
    return 0 2>/dev/null || exit 0
fi

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
limit 60 "$PY" -m nspy_mcp env --refresh || status=1
echo "== nspy-mcp env --deep (a real one-kernel ncu run)"
limit 300 "$PY" -m nspy_mcp env --refresh --deep || status=1
echo "== nspy-mcp metrics: a valid, a misspelled and a base name"
limit 120 "$PY" -m nspy_mcp metrics gpu__time_duration.sum \
    dram__throughput.avg.pct_of_peak_sustaned_elapsed dram__throughput
[ $? -le 1 ] || status=1

echo "== pytest -m gpu (GPU tests and the GPU examples, via tests/test_examples.py)"
# -s: the GPU tests print the numbers the closing notes quote. Warnings are reported, not
# fatal, here: a third-party warning on a GPU host must not cost a GPU run.
limit "$TEST_TIMEOUT_S" "$PY" -m pytest -m gpu -q -s -W default -p no:cacheprovider ${NSPY_GPU_PYTEST_ARGS:-}
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "no GPU tests collected"
    status=1
elif [ "$rc" -ne 0 ]; then
    status=1
fi

if [ -z "${NSPY_GPU_SKIP_BENCH:-}" ]; then
    echo "== benchmark: softmax sweep, ours vs raw ncu (tools/bench/bench_softmax.py)"
    limit 600 "$PY" tools/bench/bench_softmax.py ${NSPY_BENCH_JSON:+--json "$NSPY_BENCH_JSON"} || status=1
fi

echo "== gpu_check: $([ "$status" -eq 0 ] && echo OK || echo FAILED)"
exit "$status"
