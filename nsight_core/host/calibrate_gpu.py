"""The calibration child: what one GPU reaches, measured, written as JSON to the given path.

    python -m nsight_core.host.calibrate_gpu OUT.json

Run by `host.ceilings.calibrate` in a process of its own (its own CUDA context, a time
limit, the process group killed at the end), with ``CUDA_VISIBLE_DEVICES`` naming the one
GPU. Two numbers, each the best of several timed repeats after a warm-up, timed with CUDA
events:

- **streaming bandwidth**: a device-to-device copy of a buffer far larger than L2
  (``dst.copy_(src)``), counted as the bytes read plus the bytes written;
- **dense bf16 math**: a square bf16 matrix product (``a @ b``, cuBLAS), counted as
  ``2 n^3`` operations.

The best, not the median, since a ceiling is what the GPU can do, and anything else
running only lowers it. Nothing is printed: the parent reads the file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COPY_BYTES = 1 << 30
"""1 GiB each way: about 20 times an H100's or H200's L2, so the copy streams from DRAM."""
MATMUL_N = 8192
REPEATS = 10


def _best_ms(fn: Any, torch: Any) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, float(start.elapsed_time(end)))
    return best


def measure() -> dict[str, Any]:
    import torch  # lazy: only this child imports a framework

    buffers = [torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda") for _ in range(2)]
    copy_ms = _best_ms(lambda: buffers[1].copy_(buffers[0]), torch)
    buffers.clear()
    mats = [torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    mm_ms = _best_ms(lambda: mats[0] @ mats[1], torch)
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "stream_bytes_per_s": 2 * COPY_BYTES / (copy_ms * 1e-3),
        "stream_method": f"device-to-device copy of {COPY_BYTES >> 20} MiB, read + write, "
        f"best of {REPEATS} (CUDA events)",
        "dense_bf16_flops": 2 * MATMUL_N**3 / (mm_ms * 1e-3),
        "dense_method": f"bf16 matrix product {MATMUL_N}^3 (torch.matmul), best of {REPEATS}",
        "torch": torch.__version__,
    }


def main(argv: list[str]) -> int:
    Path(argv[1]).write_text(json.dumps(measure()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
