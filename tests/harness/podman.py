"""A real CDI consumer for tests: podman resolving dralet's spec files into a container.

``run_container(cdi_dir, devices)`` runs ``podman run --device <id> ... --rootfs DIR``
inside a private mount namespace (``unshare -m --propagation private``) where the
given CDI directory is bind-mounted over ``/var/run/cdi`` and an empty directory over
``/etc/cdi``: podman sees exactly the specs under test, and the host's CDI directories
are never read or written. The container is an exploded busybox rootfs built once per
busybox binary (no image, no registry), started with ``--rm`` and ``--network=none``, so
nothing is left behind: no container, no network, no mount (the namespace dies with
podman).

Before the caller's command, a probe in the container reports what the runtime gave
it, through three file descriptors podman passes in (``--preserve-fds``), so the
command's own stdout stays untouched: the initial process environment
(``/proc/1/environ``), every entry under ``/dev`` and the mount table. When podman
itself fails (exit 125/126 before the container ran) the run is repeated at debug log
level, where podman 4.3 prints the CDI registry's reason, and that reason is returned.

The workarounds for Debian 12's podman 4.3.1 are built in and tunable through
``PodmanSettings``: ``--runtime runc`` (crun 1.8 refuses hybrid cgroups), rlimits pinned
at or below this process's hard limits, and ``--network=none``.

Everything is synchronous; from an async test call it in a thread
(``await asyncio.to_thread(podman.run_container, cdi_dir, devices)``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Availability",
    "ContainerChanges",
    "ContainerRun",
    "DeviceFile",
    "MountEntry",
    "PodmanSettings",
    "PodmanUnavailableError",
    "available",
    "ensure_rootfs",
    "run_container",
]

# Podman's exit codes for its own failures (as opposed to the container command's).
EXIT_PODMAN_ERROR = 125
EXIT_CANNOT_INVOKE = 126
PODMAN_FAILURE_CODES = frozenset({EXIT_PODMAN_ERROR, EXIT_CANNOT_INVOKE})
# podman's own defaults, above this machine's hard limits; we never ask for more.
PODMAN_DEFAULT_NOFILE = 1_048_576
# podman lowers its own RLIMIT_NPROC hard limit to this before starting the container.
PODMAN_NPROC_CEILING = 32_768
DIGEST_PREFIX_LENGTH = 16
# Probe output, one host file per descriptor passed into the container.
PROBE_FDS = ("environ", "dev", "mounts")
FIRST_PASSED_FD = 3
PROBE_SCRIPT = (
    "cat /proc/1/environ >&3; "
    "find /dev -exec stat -c '%F|%t|%T|%a|%u|%g|%n' {} + >&4; "
    "cat /proc/mounts >&5; "
    'exec 3>&- 4>&- 5>&-; exec "$@"'
)
# Runs inside the private mount namespace: mount over the CDI dirs, then exec podman
# with the probe descriptors open on the host files.
NAMESPACE_SCRIPT = (
    "set -e; "
    'mount --bind "$1" "$2"; mount --bind "$3" "$4"; '
    'exec 3>"$5" 4>"$6" 5>"$7"; shift 7; exec "$@"'
)
DEFAULT_COMMAND = ("true",)
# Marks a CDI mount point the harness created on the host (and so removes again).
MOUNT_POINT_MARKER = ".dralet-podman-mount-point"
CDI_REGISTRY_MARKER = "refreshing the CDI registry: "
_LOGRUS_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')
_LOGRUS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
# Differs between any two containers whatever their CDI edits (the container id).
VOLATILE_ENV = frozenset({"HOSTNAME"})
_FILE_TYPES = {
    "character special file": "c",
    "block special file": "b",
    "fifo": "p",
    "directory": "d",
    "symbolic link": "l",
    "regular file": "f",
    "regular empty file": "f",
    "socket": "s",
}


def _default_cache_dir() -> Path:
    configured = os.environ.get("DRALET_PODMAN_CACHE")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / "dralet-podman"


@dataclass(frozen=True, kw_only=True)
class PodmanSettings:
    """Tools, paths and limits of the podman harness."""

    podman: str = "podman"
    """The podman binary (looked up on PATH)."""
    runtime: str = "runc"
    """OCI runtime passed as ``--runtime``; crun 1.8.1 fails on hybrid cgroups."""
    unshare: str = "unshare"
    """util-linux unshare, for the private mount namespace."""
    mount: str = "mount"
    """util-linux mount, run inside that namespace."""
    busybox: Path = Path("/bin/busybox")
    """A static busybox: the whole container rootfs."""
    cache_dir: Path = field(default_factory=_default_cache_dir)
    """Where the busybox rootfs is built once (env ``DRALET_PODMAN_CACHE`` overrides)."""
    dynamic_cdi_dir: Path = Path("/var/run/cdi")
    """The runtime's higher-priority CDI dir: the directory under test is mounted here."""
    static_cdi_dir: Path = Path("/etc/cdi")
    """The runtime's lower-priority CDI dir: an empty directory is mounted here."""
    nofile: int | None = None
    """RLIMIT_NOFILE for the container; None: this process's hard limit, capped."""
    nproc: int | None = None
    """RLIMIT_NPROC for the container; None: this process's hard limit, capped."""
    container_timeout_s: int = 60
    """podman ``--timeout``: the container is killed after this long (exit 255)."""
    process_grace_s: float = 30.0
    """Extra time podman gets beyond the container timeout before it is killed."""
    debug_rerun_timeout_s: float = 30.0
    """Limit for the debug-level rerun that fetches the CDI registry's reason."""


@dataclass(frozen=True)
class Availability:
    """Whether the harness can run here, and if not, why."""

    ok: bool
    reason: str

    def __bool__(self) -> bool:
        return self.ok


class PodmanUnavailableError(RuntimeError):
    """The harness cannot run on this machine (see ``available()``)."""


@dataclass(frozen=True)
class DeviceFile:
    """One entry under the container's ``/dev`` as ``stat`` saw it."""

    path: str
    type: str
    """``c`` char device, ``b`` block, ``p`` fifo, ``d`` dir, ``l`` symlink, ``f``, ``s``."""
    major: int
    minor: int
    mode: int
    """Permission bits, e.g. ``0o600``."""
    uid: int
    gid: int


@dataclass(frozen=True)
class MountEntry:
    """One line of the container's ``/proc/mounts``."""

    source: str
    target: str
    fstype: str
    options: tuple[str, ...]

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


@dataclass(frozen=True)
class ContainerChanges:
    """What one run's container had that a baseline run's container had not."""

    env: Mapping[str, str]
    """Variables added or changed (the container's hostname excluded)."""
    dev: Mapping[str, DeviceFile]
    """Entries under ``/dev`` added or changed."""
    mounts: tuple[MountEntry, ...]
    """Mounts added, in mount-table order."""


@dataclass(frozen=True)
class ContainerRun:
    """What one ``podman run`` did, as the container saw it."""

    argv: tuple[str, ...]
    """The full command line run on the host."""
    exit_code: int
    """The container command's exit code, or podman's own when ``started`` is False."""
    stdout: str
    """The container command's stdout (the probe writes elsewhere)."""
    stderr: str
    """The container command's stderr and podman's messages."""
    started: bool
    """The container process ran (the probe reported); False when podman failed first."""
    env: Mapping[str, str]
    """The container process's initial environment (``/proc/1/environ``)."""
    dev: Mapping[str, DeviceFile]
    """Every entry under ``/dev``, by path."""
    mounts: tuple[MountEntry, ...]
    """The container's mount table."""
    cdi_error: str | None
    """On a podman failure, the CDI registry's reason from a debug-level rerun."""
    duration_s: float
    """Wall time of the run itself (not the debug rerun)."""

    @property
    def ok(self) -> bool:
        return self.started and self.exit_code == 0

    @property
    def podman_failed(self) -> bool:
        return not self.started and self.exit_code != 0

    @property
    def unresolvable(self) -> bool:
        """podman refused: a requested CDI device is not in any loaded spec."""
        return (
            self.podman_failed
            and self.exit_code == EXIT_CANNOT_INVOKE
            and "unresolvable CDI devices" in self.stderr
        )

    @property
    def panicked(self) -> bool:
        """podman crashed with a Go panic (its CDI library does on 1-char vendors)."""
        return self.podman_failed and "panic: " in self.stderr

    def device_nodes(self) -> dict[str, DeviceFile]:
        """Only the block and character devices under ``/dev``."""
        return {path: f for path, f in self.dev.items() if f.type in ("b", "c")}

    def changes_from(self, baseline: ContainerRun) -> ContainerChanges:
        """The edits this container got beyond ``baseline`` (typically a run with no device)."""
        return ContainerChanges(
            env={
                name: value
                for name, value in self.env.items()
                if name not in VOLATILE_ENV and baseline.env.get(name) != value
            },
            dev={path: f for path, f in self.dev.items() if baseline.dev.get(path) != f},
            mounts=tuple(m for m in self.mounts if m not in baseline.mounts),
        )

    def mount_at(self, target: str) -> MountEntry | None:
        """The last (topmost) mount at ``target``, if any."""
        found = [m for m in self.mounts if m.target == target]
        return found[-1] if found else None


def _missing_tools(settings: PodmanSettings) -> list[str]:
    missing = [
        tool
        for tool in (settings.podman, settings.runtime, settings.unshare, settings.mount)
        if shutil.which(tool) is None
    ]
    if not os.access(settings.busybox, os.X_OK):
        missing.append(str(settings.busybox))
    return missing


def available(*, settings: PodmanSettings | None = None) -> Availability:
    """Can ``run_container`` work here? Needs Linux, root, podman, runc, busybox, unshare."""
    settings = settings or PodmanSettings()
    if not sys.platform.startswith("linux"):
        return Availability(False, f"needs Linux (this is {sys.platform})")
    if os.geteuid() != 0:
        return Availability(False, "needs root (podman with --rootfs, bind mounts over CDI dirs)")
    missing = _missing_tools(settings)
    if missing:
        return Availability(
            False,
            f"missing {', '.join(missing)} (apt-get install -y --no-install-recommends "
            "podman runc busybox-static)",
        )
    return Availability(True, "podman, runc, busybox and unshare found; running as root")


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:DIGEST_PREFIX_LENGTH]


ROOTFS_DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "mnt", "run", "var")


def ensure_rootfs(*, settings: PodmanSettings | None = None) -> Path:
    """The busybox rootfs for ``settings.busybox``, built once under ``settings.cache_dir``.

    Built in a temp directory and renamed into place, so concurrent callers either
    find a complete rootfs or build their own and one rename wins.
    """
    settings = settings or PodmanSettings()
    target = settings.cache_dir / f"busybox-rootfs-{_file_digest(settings.busybox)}"
    if (target / "bin" / "busybox").is_file():
        return target
    settings.cache_dir.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=settings.cache_dir, prefix=".rootfs-"))
    try:
        for name in ROOTFS_DIRS:
            (building / name).mkdir()
        (building / "tmp").chmod(0o1777)
        shutil.copy2(settings.busybox, building / "bin" / "busybox")
        applets = subprocess.run(
            [str(settings.busybox), "--list"], check=True, capture_output=True, text=True
        ).stdout.split()
        for applet in applets:
            if applet != "busybox":
                (building / "bin" / applet).symlink_to("busybox")
        try:
            building.rename(target)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    finally:
        if building.exists():
            shutil.rmtree(building)
    return target


def _rlimit(configured: int | None, which: int, ceiling: int) -> int:
    if configured is not None:
        return configured
    hard = resource.getrlimit(which)[1]
    return ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)


@contextlib.contextmanager
def _mount_point(path: Path) -> Iterator[None]:
    """Make sure ``path`` exists as a mount point while the run lasts.

    A CDI dir the host lacks is created with a marker file in it (hidden from podman,
    which sees the bind mount over it; ignored by runtimes, which load only .json and
    .yaml) and removed when the last run using it ends, in any thread or process: each
    run holds a shared flock on the directory, and on the way out tries to turn it into
    an exclusive one without waiting. ``flock`` drops the shared lock first, so of
    runs ending together one always succeeds; it removes the directory if the marker
    says a run created it.
    """
    marker = path / MOUNT_POINT_MARKER
    while True:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o755)
            marker.touch()
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # removed by another run's clean-up in between: start over
    try:
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another run still uses it; the last one out cleans up
        else:
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
                with contextlib.suppress(OSError):
                    path.rmdir()  # only if still empty
        finally:
            os.close(fd)


def _podman_argv(
    *,
    settings: PodmanSettings,
    rootfs: Path,
    devices: Sequence[str],
    command: Sequence[str],
    extra_args: Sequence[str],
    debug: bool,
) -> list[str]:
    nofile = _rlimit(settings.nofile, resource.RLIMIT_NOFILE, PODMAN_DEFAULT_NOFILE)
    nproc = _rlimit(settings.nproc, resource.RLIMIT_NPROC, PODMAN_NPROC_CEILING)
    argv = [settings.podman]
    if debug:
        argv.append("--log-level=debug")
    argv += [
        "run",
        "--rm",
        f"--runtime={settings.runtime}",
        "--network=none",
        f"--ulimit=nofile={nofile}:{nofile}",
        f"--ulimit=nproc={nproc}:{nproc}",
        f"--timeout={settings.container_timeout_s}",
        f"--preserve-fds={len(PROBE_FDS)}",
    ]
    argv += [f"--device={device}" for device in devices]
    argv += list(extra_args)
    # --rootfs is a boolean flag: every option must come before it, then the rootfs path.
    argv += ["--rootfs", str(rootfs), "/bin/sh", "-c", PROBE_SCRIPT, "dralet-probe"]
    argv += list(command or DEFAULT_COMMAND)
    return argv


def _parse_environ(raw: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in raw.decode(errors="replace").split("\0"):
        name, sep, value = entry.partition("=")
        if sep:
            env[name] = value
    return env


def _parse_dev(raw: str) -> dict[str, DeviceFile]:
    found: dict[str, DeviceFile] = {}
    for line in raw.splitlines():
        parts = line.split("|", 6)
        if len(parts) != len(("type", "major", "minor", "mode", "uid", "gid", "path")):
            continue
        kind, major, minor, mode, uid, gid, path = parts
        found[path] = DeviceFile(
            path=path,
            type=_FILE_TYPES.get(kind, "?"),
            major=int(major, 16),
            minor=int(minor, 16),
            mode=int(mode, 8),
            uid=int(uid),
            gid=int(gid),
        )
    return found


def _unescape_mount_field(value: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), value)


def _parse_mounts(raw: str) -> tuple[MountEntry, ...]:
    entries = []
    for line in raw.splitlines():
        parts = line.split()
        if len(parts) < len(("source", "target", "fstype", "options")):
            continue
        source, target, fstype, options = (_unescape_mount_field(p) for p in parts[:4])
        entries.append(MountEntry(source, target, fstype, tuple(options.split(","))))
    return tuple(entries)


def _unescape_logrus(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: _LOGRUS_ESCAPES.get(m.group(1), m.group(1)), quoted)


def _cdi_reason(debug_stderr: str) -> str | None:
    """The CDI registry's error from podman's debug log, else podman's ``Error:`` line."""
    reasons = []
    for line in debug_stderr.splitlines():
        match = _LOGRUS_MSG.search(line)
        if match and CDI_REGISTRY_MARKER in match.group(1):
            message = _unescape_logrus(match.group(1))
            reasons.append(message.split(CDI_REGISTRY_MARKER, 1)[1].strip())
    if reasons:
        return "\n".join(reasons)
    errors = [line for line in debug_stderr.splitlines() if line.startswith("Error: ")]
    return errors[-1].removeprefix("Error: ") if errors else None


def _run_in_namespace(
    *,
    settings: PodmanSettings,
    cdi_dir: Path,
    podman_argv: Sequence[str],
    timeout_s: float,
) -> tuple[subprocess.CompletedProcess[str], dict[str, bytes]]:
    with (
        tempfile.TemporaryDirectory(prefix="dralet-podman-") as scratch_name,
        _mount_point(settings.dynamic_cdi_dir),
        _mount_point(settings.static_cdi_dir),
    ):
        scratch = Path(scratch_name)
        empty = scratch / "empty-cdi"
        empty.mkdir()
        probe_files = [scratch / name for name in PROBE_FDS]
        argv = [
            settings.unshare,
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            NAMESPACE_SCRIPT,
            "dralet-cdi-namespace",
            str(cdi_dir),
            str(settings.dynamic_cdi_dir),
            str(empty),
            str(settings.static_cdi_dir),
            *(str(p) for p in probe_files),
            *podman_argv,
        ]
        completed = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        outputs = {name: p.read_bytes() for name, p in zip(PROBE_FDS, probe_files, strict=True)}
    return completed, outputs


def run_container(
    cdi_dir: Path,
    devices: Sequence[str],
    *,
    command: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    settings: PodmanSettings | None = None,
) -> ContainerRun:
    """Run ``command`` (default ``true``) in a busybox container given CDI ``devices``.

    ``cdi_dir`` is the only CDI directory podman reads. ``extra_args`` are podman run
    options placed before ``--rootfs``. Raises ``PodmanUnavailableError`` when
    ``available()`` is false, ``subprocess.TimeoutExpired`` when podman outlives
    the container timeout plus grace.
    """
    settings = settings or PodmanSettings()
    state = available(settings=settings)
    if not state:
        raise PodmanUnavailableError(state.reason)
    cdi_dir = Path(cdi_dir).resolve()
    rootfs = ensure_rootfs(settings=settings)
    podman_argv = _podman_argv(
        settings=settings,
        rootfs=rootfs,
        devices=devices,
        command=command,
        extra_args=extra_args,
        debug=False,
    )
    started_at = time.monotonic()
    completed, outputs = _run_in_namespace(
        settings=settings,
        cdi_dir=cdi_dir,
        podman_argv=podman_argv,
        timeout_s=settings.container_timeout_s + settings.process_grace_s,
    )
    duration = time.monotonic() - started_at
    started = bool(outputs["environ"])
    cdi_error = None
    if not started and completed.returncode in PODMAN_FAILURE_CODES:
        cdi_error = _debug_reason(
            settings=settings,
            cdi_dir=cdi_dir,
            rootfs=rootfs,
            devices=devices,
            extra_args=extra_args,
        )
    return ContainerRun(
        argv=tuple(podman_argv),
        exit_code=completed.returncode,
        stdout=completed.stdout,
        stderr=completed.stderr,
        started=started,
        env=_parse_environ(outputs["environ"]),
        dev=_parse_dev(outputs["dev"].decode(errors="replace")),
        mounts=_parse_mounts(outputs["mounts"].decode(errors="replace")),
        cdi_error=cdi_error,
        duration_s=duration,
    )


def _debug_reason(
    *,
    settings: PodmanSettings,
    cdi_dir: Path,
    rootfs: Path,
    devices: Sequence[str],
    extra_args: Sequence[str],
) -> str | None:
    # A failing CDI resolution stops before conmon starts, so this rerun is quick; a
    # run that gets further at debug level waits ~20 s on conmon, hence the short limit
    # and the short container timeout.
    quick = dataclasses.replace(
        settings, container_timeout_s=max(1, int(settings.debug_rerun_timeout_s))
    )
    argv = _podman_argv(
        settings=quick,
        rootfs=rootfs,
        devices=devices,
        command=DEFAULT_COMMAND,
        extra_args=extra_args,
        debug=True,
    )
    try:
        completed, _ = _run_in_namespace(
            settings=settings,
            cdi_dir=cdi_dir,
            podman_argv=argv,
            timeout_s=settings.debug_rerun_timeout_s,
        )
    except subprocess.TimeoutExpired:
        return None
    return _cdi_reason(completed.stderr)
