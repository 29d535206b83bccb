"""nsight_core: check and profile GPU kernel candidates with Nsight Compute; trust the numbers.

``import nsight_core as nsight`` runs Nsight Python 1.1 programs: ``nsight.analyze.kernel``,
``nsight.analyze.plot``, ``nsight.annotate``, ``nsight.VerbosityLevel``,
``nsight.exceptions`` and ``nsight.utils`` (docs/compat.md lists the deliberate differences).

Importing this package is cheap: no torch, triton, cupy, pandas or ncu_report is imported
here; each stage imports what it needs when it runs.
"""

from nsight_core import analyze, exceptions, utils
from nsight_core.annotation import annotate
from nsight_core.api import ProfileResults, VerbosityLevel, kernel
from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.request import ProfileRequest
from nsight_core.results import ProfileResult, Row

__all__ = [
    "ErrorClass",
    "NsightCoreError",
    "ProfileRequest",
    "ProfileResult",
    "ProfileResults",
    "Row",
    "VerbosityLevel",
    "analyze",
    "annotate",
    "exceptions",
    "kernel",
    "utils",
]
