"""This host's GPUs as slots a job waits for: one lock per GPU, shared with other servers.

`DeviceLocks` lists the GPUs from NVML as CUDA_VISIBLE_DEVICES leaves them (one ``cpu`` slot
on a host without a GPU), takes an ``flock`` per GPU so nspy-mcp servers in other processes of
this user wait too, serves waiting jobs in order, prefers a free idle GPU to one that other
processes use, and honours a named `device`. A job's processes see only its GPU, and its
rows record the GPU's index, UUID and name (`with_gpu`). Waits are accounted by cause:
'queue' for this server's own jobs, 'device' for other processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.host.probe import gpu_process_counts, list_gpus
from nsight_core.results import ProfileResult

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process device lock
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

CROSS_PROCESS_POLL_S = 0.25
"""Retry interval while another process holds the device's lock file."""

BUSY_TTL_S = 1.0
"""How long a reading of which GPUs other processes use is trusted while jobs wait."""


@dataclass(frozen=True)
class GpuSlot:
    """One place a job runs: a GPU (NVML index, UUID, name) or, on a host without one, the CPU."""

    key: str
    """Lock name: ``gpu-<index>`` (or ``gpu-<uuid>`` for a GPU NVML does not list), ``cpu``."""
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    visible: str | None = None
    """CUDA_VISIBLE_DEVICES for the job's processes (the UUID when known); None: the CPU."""

    @property
    def label(self) -> str:
        if self.visible is None:
            return "the CPU (no GPU visible)"
        ident = ", ".join(x for x in (self.name, self.uuid) if x)
        number = self.index if self.index is not None else self.visible
        return f"GPU {number}" + (f" ({ident})" if ident else "")


CPU_SLOT = GpuSlot("cpu")


def gpu_slot(index: int, uuid: str | None = None, name: str | None = None) -> GpuSlot:
    """The slot of the GPU NVML numbers `index`."""
    return GpuSlot(f"gpu-{index}", index, uuid, name, uuid or str(index))


def discover_slots(cvd: str | None) -> list[GpuSlot]:
    """This host's GPUs as ``cvd`` (the server's CUDA_VISIBLE_DEVICES, `EngineConfig`) leaves
    them, in its order; else the CPU slot.

    Indices in CUDA_VISIBLE_DEVICES are taken as NVML's (PCI order: set
    CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees); UUIDs and their prefixes match by UUID.
    """
    if cvd is not None and cvd.strip() in {"", "-1"}:
        return [CPU_SLOT]
    gpus = list_gpus()
    if not gpus:
        return [CPU_SLOT]
    if cvd is None:
        return [gpu_slot(g.index, g.uuid, g.name) for g in gpus]
    slots: list[GpuSlot] = []
    for entry in (e.strip() for e in cvd.split(",")):
        if not entry:
            continue
        match = next((g for g in gpus if g.uuid and g.uuid.startswith(entry)), None)
        if match is None and entry.isdigit():
            match = next((g for g in gpus if g.index == int(entry)), None)
        if match is not None:
            slots.append(gpu_slot(match.index, match.uuid, match.name))
        else:  # a MIG instance or a name NVML lists differently: pass it on as given
            slots.append(GpuSlot(f"gpu-{re.sub(r'[^A-Za-z0-9_-]', '_', entry)}", visible=entry))
    return slots or [CPU_SLOT]


def resolve_device(device: int | str | None, slots: list[GpuSlot]) -> GpuSlot | None:
    """The slot a request's `device` names (None: any); raises NsightCoreError if none."""
    if device is None:
        return None
    for slot in slots:
        if isinstance(device, int) and slot.index == device:
            return slot
        if isinstance(device, str) and device.lower() in {
            (slot.uuid or "").lower(),
            (slot.visible or "").lower(),
        }:
            return slot
    gpus = [s for s in slots if s.visible is not None]
    listed = "; ".join(s.label for s in gpus) if gpus else "none (no GPU is visible here)"
    raise NsightCoreError(
        ErrorClass.INVALID_REQUEST,
        f"device {device!r} is not a GPU this server can use; its GPUs: {listed}",
        "pass one of those indices or UUIDs (check_environment lists them), or leave device "
        "unset to take the first free, idle GPU",
    )


def with_gpu(result: ProfileResult, slot: GpuSlot) -> ProfileResult:
    """The result with the GPU it ran on recorded in its provenance and every row."""
    if slot.visible is None:
        return result
    rows = [
        r.model_copy(
            update={"GPUIndex": slot.index, "GPUUUID": slot.uuid, "GPU": r.GPU or slot.name}
        )
        for r in result.rows
    ]
    update: dict[str, object] = {"rows": rows}
    if result.provenance is not None:
        prov = result.provenance
        update["provenance"] = prov.model_copy(
            update={
                "gpu": prov.gpu or slot.name,
                "gpu_uuid": slot.uuid or prov.gpu_uuid,
                "gpu_index": slot.index,
            }
        )
    return result.model_copy(update=update)


def default_lock_dir() -> Path:
    """Where the lock files live when `EngineConfig.lock_dir` names no directory."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"nspy-mcp-{uid}"


BusyReader = Callable[[], dict[int, int]]


@dataclass(eq=False)
class _Ticket:
    """A job waiting for a slot: the one it names, or any."""

    want: GpuSlot | None
    slot: GpuSlot | None = None


class DeviceLocks:
    """One job at a time per GPU (or the CPU), within this process and across processes.

    Waiting jobs are served in order. A job that names no GPU gets a free, idle one (no
    other process on it, by `busy`, read from NVML); while only busy GPUs are free it waits
    for one of this server's jobs to end, and takes the least busy one once none runs.
    """

    def __init__(
        self,
        lock_dir: Path | None = None,
        *,
        gpus: list[GpuSlot] | None = None,
        busy: BusyReader | None = None,
        visible: str | None = None,
    ) -> None:
        self._dir = lock_dir
        self._visible = visible
        """The server's CUDA_VISIBLE_DEVICES (`EngineConfig.visible_devices`), read when the
        slots are first needed (`discover`)."""
        self._slots = gpus
        self._discover_lock = threading.Lock()
        self._busy_reader = busy
        self._busy: dict[int, int] = {}
        self._busy_read_at = -1e9
        self._held: dict[str, int | None] = {}
        self._waiting: list[_Ticket] = []
        self._changed = anyio.Event()

    async def slots(self) -> list[GpuSlot]:
        """The slots jobs share (NVML is read once, on first use)."""
        if self._slots is None:
            await anyio.to_thread.run_sync(self.discover)
        assert self._slots is not None
        return self._slots

    def known_slots(self) -> list[GpuSlot]:
        """The slots, once `discover` has read them (else none)."""
        return list(self._slots or [])

    def discover(self) -> None:
        """Read the slots now, from any thread (the server starts it at start, so the first
        request finds them read or waits for that one read); a no-op once they are known."""
        with self._discover_lock:
            if self._slots is None:
                self._slots = discover_slots(self._visible)

    @contextlib.asynccontextmanager
    async def take(
        self,
        want: GpuSlot | None,
        on_wait: Callable[[str], None],
        waits: dict[str, float] | None = None,
    ) -> AsyncIterator[GpuSlot]:
        """Wait for `want` (None: the best free slot) and hold it for the block.

        `waits` receives the seconds waited by cause: 'queue' (behind this server's jobs)
        and 'device' (another process's lock, or GPUs busy with other processes)."""
        await self.slots()
        ticket = _Ticket(want)
        self._waiting.append(ticket)
        told: set[str] = set()
        try:
            while True:
                await self._refresh_busy()
                self._dispatch()
                if ticket.slot is not None:
                    break
                why = self._why_waiting(ticket)
                if why not in told:
                    told.add(why)
                    on_wait(why)
                changed = self._changed
                since = time.monotonic()
                with anyio.move_on_after(CROSS_PROCESS_POLL_S):
                    await changed.wait()
                _account(waits, "queue" if OURS in why else "device", since)
        except BaseException:
            if ticket.slot is not None:  # given to it just as it was cancelled
                self._release(ticket.slot)
            raise
        finally:
            self._waiting.remove(ticket)
        try:
            yield ticket.slot
        finally:
            self._release(ticket.slot)

    # -- placing -------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Give free slots to waiting jobs, oldest first (no await: one pass at a time)."""
        placed = False
        for ticket in self._waiting:
            if ticket.slot is not None:
                continue
            for slot in self._choices(ticket):
                if slot.key in self._held:
                    continue
                fd = self._try_flock(slot.key)
                if fd is False:
                    continue
                self._held[slot.key] = fd if isinstance(fd, int) else None
                ticket.slot = slot
                placed = True
                break
        if placed:
            self._notify()

    def _choices(self, ticket: _Ticket) -> list[GpuSlot]:
        assert self._slots is not None
        if ticket.want is not None:
            return [ticket.want]
        free = [s for s in self._slots if s.key not in self._held]
        idle = [s for s in free if not self._busy_count(s)]
        if idle:
            return idle
        if self._held:  # one of ours ends sooner or later: wait for it rather than share
            return []
        return sorted(free, key=self._busy_count)

    def _busy_count(self, slot: GpuSlot) -> int:
        return self._busy.get(slot.index, 0) if slot.index is not None else 0

    def _why_waiting(self, ticket: _Ticket) -> str:
        """Why the ticket waits; the words name whose jobs it waits for (`OURS`)."""
        assert self._slots is not None
        wanted = [ticket.want] if ticket.want is not None else self._slots
        ours = [s.key for s in wanted if s.key in self._held]
        if len(ours) == len(wanted):
            return f"queued: another job {OURS} is using {', '.join(ours)}"
        free = [s for s in wanted if s.key not in self._held]
        if ticket.want is None and all(self._busy_count(s) for s in free):
            keys = ", ".join(s.key for s in free)
            return f"queued: waiting for an idle GPU ({keys} in use by other processes)"
        if ticket.want is None and any(
            t.want is None for t in self._waiting[: self._waiting.index(ticket)]
        ):
            return f"queued: behind other jobs {OURS}"
        keys = ", ".join(s.key for s in free)
        return f"queued: another nspy-mcp process is using {keys}"

    async def _refresh_busy(self) -> None:
        assert self._slots is not None
        if not any(s.index is not None for s in self._slots) and self._busy_reader is None:
            return
        now = anyio.current_time()
        if now - self._busy_read_at < BUSY_TTL_S:
            return
        self._busy_read_at = now
        reader = self._busy_reader or _nvml_busy
        self._busy = await anyio.to_thread.run_sync(reader)

    # -- the cross-process part ----------------------------------------------------------

    def _try_flock(self, key: str) -> int | bool:
        """A held lock file descriptor; True where flock does not exist; False if taken."""
        if fcntl is None:  # pragma: no cover
            return True
        directory = self._dir or default_lock_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(directory / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        return fd

    def _release(self, slot: GpuSlot) -> None:
        fd = self._held.pop(slot.key, None)
        if fd is not None:
            os.close(fd)  # drops the flock
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()


def _nvml_busy() -> dict[int, int]:
    return gpu_process_counts()


OURS = "of this server"
"""In a reason to wait: the job waits for this server's own jobs (a 'queue' wait), not for
another process (a 'device' wait)."""


def _account(waits: dict[str, float] | None, cause: str, since: float) -> None:
    """Add the seconds since `since` to `waits[cause]`."""
    if waits is not None:
        waits[cause] = waits.get(cause, 0.0) + time.monotonic() - since
