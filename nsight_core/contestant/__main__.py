"""``python -m nsight_core.contestant``: the contestant process.

A request job's contestant begins its two side threads (the CUDA context, Triton's start)
before it imports the harness: both need only the standard library, and every moment they
run beside an import is off the job's critical path (runtime/early_cuda.py,
runtime/triton_prep.py). core.main joins them before confinement.
"""

import sys

from nsight_core.runtime.early_cuda import EarlyCuda
from nsight_core.runtime.triton_prep import TritonPrep

if __name__ == "__main__":
    request_job = sys.argv[1:2] != ["--function"]
    early = EarlyCuda() if request_job else None
    prep = TritonPrep() if request_job else None
    from nsight_core.contestant.core import main

    sys.exit(main(sys.argv, early=early, prep=prep))
