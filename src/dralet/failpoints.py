"""Named failpoints at every durable step, for crash-safety tests.

Production code calls ``failpoints.hit("cdi.write.after-rename")`` at each point where a
crash would leave a distinct state on disk. Nothing happens unless the environment
variable ``DRALET_FAILPOINTS`` (read once per process) or ``arm()`` names that point:

- ``name=kill``  the process SIGKILLs itself (the crash suite's main tool);
- ``name=error`` an ``OSError(EIO)`` is raised at that point;
- ``name=enospc`` / ``name=eacces`` an ``OSError`` with that errno is raised.

A name may end in ``@N`` to trigger only on its N-th hit (1-based). When
``DRALET_FAILPOINT_LOG`` (also read once) names a file, every hit is appended to it so
a harness can report which failpoints a run covered. Owned by dralet core; the crash
campaign under ``tests/`` arms them.
"""

from __future__ import annotations

import errno
import os
import signal
import threading

__all__ = ["ENV_ARM", "ENV_LOG", "arm", "declare", "disarm", "hit", "known"]

ENV_ARM = "DRALET_FAILPOINTS"
ENV_LOG = "DRALET_FAILPOINT_LOG"

_ERRNOS = {"error": errno.EIO, "enospc": errno.ENOSPC, "eacces": errno.EACCES}
_known: set[str] = set()
_armed: dict[str, tuple[str, int]] = {}
_hits: dict[str, int] = {}
_lock = threading.Lock()
_env_loaded = False
_log_path = ""


def declare(*names: str) -> None:
    """Register failpoint names so a harness can list and cover all of them."""
    _known.update(names)


def known() -> frozenset[str]:
    """Every failpoint name declared so far (modules declare theirs at import)."""
    return frozenset(_known)


def _parse(spec: str) -> dict[str, tuple[str, int]]:
    armed: dict[str, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        nth = 0
        if "@" in name:
            name, _, count = name.partition("@")
            nth = int(count)
        armed[name] = (action or "kill", nth)
    return armed


def _load_env() -> None:
    global _env_loaded, _log_path
    if not _env_loaded:
        _armed.update(_parse(os.environ.get(ENV_ARM, "")))
        _log_path = os.environ.get(ENV_LOG, "")
        _env_loaded = True


def arm(name: str, action: str = "error", *, nth: int = 0) -> None:
    """Arm a failpoint in this process (tests); ``nth`` 0 means every hit."""
    with _lock:
        _load_env()
        _armed[name] = (action, nth)
        _hits[name] = 0


def disarm(name: str | None = None) -> None:
    """Disarm one failpoint, or all of them when ``name`` is None."""
    with _lock:
        if name is None:
            _armed.clear()
            _hits.clear()
        else:
            _armed.pop(name, None)
            _hits.pop(name, None)


def hit(name: str) -> None:
    """Mark that execution reached ``name``; crash or fail here if it is armed."""
    if _env_loaded and not _armed and not _log_path:
        return  # nothing armed or logged: the path every production hit takes
    with _lock:
        _load_env()
        if _log_path:
            with open(_log_path, "a", encoding="utf-8") as log:
                log.write(name + "\n")
        if name not in _armed:
            return
        action, nth = _armed[name]
        _hits[name] = _hits.get(name, 0) + 1
        if nth and _hits[name] != nth:
            return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    code = _ERRNOS.get(action, errno.EIO)
    raise OSError(code, f"failpoint {name}: {os.strerror(code)}")
