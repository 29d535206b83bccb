"""From a finished run to a ProfileResult: per-run values, rows and statistics, suspects, cross-checks and the speed-of-light diagnosis."""
