"""What a server's standbys were started for, kept in the result store so that the next
server on that store starts the same ones (`EngineConfig.standby_at_start`): apart from
standby.py because it is a file format, read and written by the executor too."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

from nsight_core.protocol import LaunchSpec

MEMORY_FILE = "standby.json"
"""In the result store's root: the settings each GPU's standbys were last started for."""


class StandbyMemory:
    """The specs a server's standbys were started for, per GPU slot, in one JSON file of the
    result store: ``{"slots": {"gpu-0": [spec, ...]}}``, oldest first. Only specs are kept;
    a job's environment (GPU, JIT caches) is the starting server's own."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def recall(self, slot: str) -> list[LaunchSpec]:
        """The slot's specs; none when the file is missing or unreadable (nothing to start)."""
        raw = self._read().get(slot, [])
        specs: list[LaunchSpec] = []
        for item in raw if isinstance(raw, list) else []:
            with contextlib.suppress(ValueError):
                specs.append(LaunchSpec.model_validate(item))
        return specs

    def note(self, slot: str, specs: list[LaunchSpec]) -> None:
        """Replace the slot's specs (written atomically; a failed write changes nothing)."""
        with self._lock:
            slots = self._read()
            slots[slot] = [spec.model_dump(mode="json") for spec in specs]
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            with contextlib.suppress(OSError):
                tmp.write_text(json.dumps({"slots": slots}, sort_keys=True))
                os.replace(tmp, self.path)

    def _read(self) -> dict[str, object]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        slots = doc.get("slots") if isinstance(doc, dict) else None
        return dict(slots) if isinstance(slots, dict) else {}
