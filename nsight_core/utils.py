"""Availability flags under Nsight Python's names (``from nsight.utils import ...``).

Computed with `importlib.util.find_spec`, so importing this module imports none of the
packages it asks about.
"""

from __future__ import annotations

import importlib.util


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package raises
        return False


CUDA_CORE_AVAILABLE = _has("cuda.core")
"""cuda-core (NVRTC kernels in tests and examples) is importable."""
CUPTI_AVAILABLE = _has("cupti")
"""cupti-python is importable (nsight_core's ``cupti`` collector)."""
MATPLOTLIB_AVAILABLE = _has("matplotlib")
"""matplotlib (the ``plot`` extra) is importable: `nsight_core.analyze.plot` can draw."""
NVML_AVAILABLE = _has("pynvml")
"""nvidia-ml-py is importable: the thermal guard can try NVML."""

__all__ = ["CUDA_CORE_AVAILABLE", "CUPTI_AVAILABLE", "MATPLOTLIB_AVAILABLE", "NVML_AVAILABLE"]
