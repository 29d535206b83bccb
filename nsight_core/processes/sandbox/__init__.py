"""Start, limit and end processes: the only package that spawns or kills.

Stdlib-only (plus `nsight_core.errors` and `nsight_core.runtime.files`), so tools on a bare GPU
host can use it.
`run_sandboxed` runs a job; `run_command` runs a short external command (ncu, nvidia-smi)
under the same contract with output kept whole.

Contract of `run_sandboxed`:

- The child gets its own session and process group (``start_new_session``); every signal
  goes to the whole group (``killpg``), so grandchildren such as ncu's target die too.
  The group leader is not reaped until the group has been sent SIGKILL, so its id cannot
  be recycled under us.
- The child dies with its parent: ``PR_SET_PDEATHSIG`` (SIGKILL when the forking thread
  ends) and a pipe whose read end it inherits (``NSPY_SANDBOX_PARENT_FD``); a Python child
  calls `watch_parent_pipe` to kill its whole group when the pipe reports end-of-file.
- Descendants that leave the group (``setsid``) are found too: the leader is a child
  subreaper (orphans in its tree stay its descendants), and every process carries the job's
  id in ``NSPY_SANDBOX_JOBS``; at the end `/proc` is walked (group, session, parent links,
  job id) and everything found gets SIGKILL until a walk finds none alive.
- Resident memory: the RSS summed over the job's processes is polled; past
  ``limits.memory_bytes`` (default half the RAM, ``NSPY_MCP_JOB_MEMORY``) the job ends as
  ``out_of_memory`` with the peak.
- Optional file system allow-list (``fs_access``): Landlock, applied before ``exec``.
- stdin is ``/dev/null``. stdout and stderr are read through pipes into a capped head and
  a capped tail; the bytes in between are counted, never stored, so 10 MB of output costs
  only the caps. When ``output_dir`` is given each stream is saved there, capped the same way.
- The environment is an allowlist of the parent's (`ENV_ALLOW_NAMES`, `ENV_ALLOW_PREFIXES`,
  minus anything that looks like a credential, `ENV_DENY_PATTERNS`), plus explicit extras.
  ``HOME`` and ``TMPDIR`` point at a private temporary directory made for this job and
  removed afterwards unless ``keep_tmp``.
- Core dumps are off (``RLIMIT_CORE=0``) and written files are capped (``RLIMIT_FSIZE``).
  The address space is not limited: CUDA reserves far more virtual memory than it uses.
- Wall clock: SIGTERM to the group at ``limits.wall_s``, SIGKILL ``limits.kill_grace_s``
  later (or as soon as the leader is gone), so a job ends within limit + grace. A
  `Deadline` passed instead can be re-armed while the process runs (a pre-started judge
  waits under an idle limit, then gets its job's limit from the moment it is handed one).
  ``cancel`` is checked every ``limits.poll_interval_s``; when set the group gets SIGKILL
  at once. ``poll`` is called at the same pace so the caller can tail progress files.
- When `run_sandboxed` returns, the whole group has been sent SIGKILL and the leader reaped,
  also when ``poll`` raises or the caller is interrupted.
- The outcome's `ErrorClass` is decided here and nowhere else: cancelled, then
  out_of_memory, then timeout
  (with the last output lines), then a signal (crashed, with its name), then the exit
  code through ``exit_classes`` (the worker's `WORKER_EXIT_CLASS` by default); any other
  non-zero code is crashed, with the stderr tail.

The package, one module per part of that contract: `run` (the runner, `run_sandboxed` and
`run_command`), `limits` (`SandboxLimits`, `Deadline`), `env` (the allowlisted environment),
`output` (capped capture of the pipes), `tree` (a job's processes in /proc, killed together),
`this_process` (prctl: die with the parent, non-dumpable, age), `memory` (the resident-memory
limit), `landlock` (the file system allow-list), `outcome` (`SandboxOutcome` and
`classify_end`) and `mechanisms` (what is in force, for the environment report). Callers
import from the package; the names below are its surface.
"""

from nsight_core.processes.sandbox.env import (
    ENV_ALLOW_NAMES,
    ENV_ALLOW_PREFIXES,
    ENV_DENY_PATTERNS,
    build_env,
)
from nsight_core.processes.sandbox.landlock import (
    CACHE_DIR_VARS,
    SYSTEM_READ_DIRS,
    SYSTEM_WRITE_DIRS,
    FsAccess,
    default_fs_access,
    landlock_abi,
    restrict_this_process,
)
from nsight_core.processes.sandbox.limits import KILL_GRACE_S, Deadline, SandboxLimits
from nsight_core.processes.sandbox.mechanisms import SandboxMechanisms, sandbox_mechanisms
from nsight_core.processes.sandbox.memory import (
    DEFAULT_MEMORY_SHARE,
    MEMORY_ENV,
    default_memory_limit,
    parse_memory,
    physical_memory_bytes,
)
from nsight_core.processes.sandbox.outcome import SandboxOutcome, classify_end
from nsight_core.processes.sandbox.output import StreamCapture
from nsight_core.processes.sandbox.run import (
    COMMAND_KILL_GRACE_S,
    COMMAND_OUTPUT_BYTES,
    run_command,
    run_sandboxed,
)
from nsight_core.processes.sandbox.this_process import (
    PARENT_FD_ENV,
    age_of_process,
    die_with_parent,
    process_age_s,
    protect_this_process,
    watch_parent_pipe,
)
from nsight_core.processes.sandbox.tree import JOB_MARKER_ENV

__all__ = [
    "CACHE_DIR_VARS",
    "COMMAND_KILL_GRACE_S",
    "COMMAND_OUTPUT_BYTES",
    "DEFAULT_MEMORY_SHARE",
    "ENV_ALLOW_NAMES",
    "ENV_ALLOW_PREFIXES",
    "ENV_DENY_PATTERNS",
    "JOB_MARKER_ENV",
    "KILL_GRACE_S",
    "MEMORY_ENV",
    "PARENT_FD_ENV",
    "SYSTEM_READ_DIRS",
    "SYSTEM_WRITE_DIRS",
    "Deadline",
    "FsAccess",
    "SandboxLimits",
    "SandboxMechanisms",
    "SandboxOutcome",
    "StreamCapture",
    "age_of_process",
    "build_env",
    "classify_end",
    "default_fs_access",
    "default_memory_limit",
    "die_with_parent",
    "landlock_abi",
    "parse_memory",
    "physical_memory_bytes",
    "process_age_s",
    "protect_this_process",
    "restrict_this_process",
    "run_command",
    "run_sandboxed",
    "sandbox_mechanisms",
    "watch_parent_pipe",
]
