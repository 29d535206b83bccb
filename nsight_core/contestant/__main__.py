"""``python -m nsight_core.contestant``: the contestant process."""

import sys

from nsight_core.contestant.core import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
