"""Names of the files and lines the server and a job's processes agree on.

Standard library only, and importing nothing of ours: the message models (protocol.py),
the sandbox and the contestant's launch all take them from here, so the protocol sits below
the process machinery rather than on top of it.
"""

STDOUT_FILE = "stdout.txt"
"""Name of the capped stdout copy that `run_sandboxed` saves in ``output_dir``."""
STDERR_FILE = "stderr.txt"
"""Name of the capped stderr copy that `run_sandboxed` saves in ``output_dir``."""

CONTESTANT_SOCKET = "judge.sock"
"""The judge's socket in the contestant's private directory (both get the directory)."""
READY_LINE = b"ready"
"""The contestant's first line: started, waiting for its job."""
MAX_REPLY_BYTES = 1 << 20
"""A contestant reply longer than this is a protocol violation (outputs are described, not
sent: array data lives in slots)."""

READY_FILE = "ready"
"""Made in a pre-started judge's directory once it (and its contestant, if it has one yet)
has started."""
STANDBY_FILE = "standby.json"
"""A pre-started judge's `LaunchSpec`, in the directory it is started with (an idle judge's:
written by the server just before the handover)."""
STANDBY_SOCKET = "handover.sock"
"""Where a pre-started judge listens for the one job directory it will take."""
