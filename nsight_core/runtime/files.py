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
