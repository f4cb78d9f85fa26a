"""GPU health from NVML's XID errors: a thread waits on an NVML event set and remembers,
per GPU, the last XID that means the GPU (not the application) is broken.

A GPU with such an XID stays unhealthy until the driver restarts, as in NVIDIA's device
plugin: recovering from one needs a GPU reset, which dralet does not do. Application
XIDs (a program's own fault: 13, 31, 43, 45, 68, 109) leave the GPU healthy.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from dralet.drivers.nvidia.nvml import Nvml, NvmlError

__all__ = ["APPLICATION_XIDS", "XidWatch", "describe"]

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs caused by the program on the GPU (graphics engine exception, memory page fault,
stopped channel, preempted channel, video processor exception, context switch timeout):
NVIDIA's Kubernetes device plugin skips these by default too."""
_MEANINGS = {
    48: "double-bit ECC error",
    63: "row remapping pending",
    64: "row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
_WAIT_MS = 1000
_IDLE_SECONDS = 60.0
"""The thread ends when no one asked for health this long (``start`` starts it again)."""
_RETRY_SECONDS = 30.0
"""After the watch failed (NVML unreadable), how long ``start`` waits to try again."""


def describe(xid: int) -> str:
    meaning = _MEANINGS.get(xid)
    return f"XID {xid}" + (f" ({meaning})" if meaning else "")


@dataclass
class XidWatch:
    """Watches every GPU of ``nvml`` from a daemon thread started by ``start``."""

    nvml: Nvml
    wait_ms: int = _WAIT_MS
    _faults: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _failed_at: float | None = None
    _asked_at: float = 0.0

    def start(self) -> None:
        """Start watching (later calls do nothing while the thread runs, and retry a
        failed watch only after a while)."""
        with self._lock:
            self._asked_at = time.monotonic()
            if self.watching:
                return
            failed = self._failed_at
            if failed is not None and time.monotonic() - failed < _RETRY_SECONDS:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nvidia-xid", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=2 * self.wait_ms / 1000)

    @property
    def watching(self) -> bool:
        """Whether the thread is waiting on NVML's events now."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def faults(self) -> dict[str, str]:
        """GPU UUID → why it is broken, for every GPU an XID broke."""
        with self._lock:
            return dict(self._faults)

    def _idle(self) -> bool:
        with self._lock:
            return time.monotonic() - self._asked_at > _IDLE_SECONDS

    def _run(self) -> None:
        try:
            with self.nvml.session() as nvml:
                events = nvml.xid_events(nvml.gpus())
                try:
                    while not self._stop.is_set() and not self._idle():
                        event = nvml.wait_xid(events, self.wait_ms)
                        if event is None or event.xid in APPLICATION_XIDS:
                            continue
                        reason = describe(event.xid)
                        log.warning("nvidia: GPU %s reported %s", event.gpu_uuid, reason)
                        with self._lock:
                            self._faults[event.gpu_uuid] = reason
                finally:
                    nvml.free_events(events)
        except NvmlError as exc:
            log.warning("nvidia: XID errors cannot be watched: %s", exc)
            with self._lock:
                self._failed_at = time.monotonic()
