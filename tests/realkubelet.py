"""An optional real kubelet for the ``k8s`` tests: upstream's kubelet of the cluster's release
with containerd 2.x and runc (Debian's), registered with that control plane as a node of its own,
so a pod's claims are prepared by the kubelet itself and its containers are created by
containerd from dralet's CDI specs.

What this sandbox needs for it, each set below with the reason:
- no image registry can be reached: the pause and busybox images are made locally (the
  podman harness's busybox rootfs, imported with podman and loaded with ``ctr``), and pods
  use ``imagePullPolicy: Never``;
- lowering ``oom_score_adj`` is refused here: containerd's ``restrict_oom_score_adj``;
- the host has cgroup v1 (hybrid): the kubelet's ``failCgroupV1: false`` (1.35+ refuses
  cgroup v1 otherwise), the cgroupfs driver, no QoS cgroups;
- swap may be on: ``failSwapOn: false``; the node IP is the first non-loopback address;
- pods use the host network; the CNI config is loopback only, so containerd reports the
  network ready without creating bridges.

Everything lives under one temporary root (the kubelet's ``--root-dir``, ``--cert-dir`` and
``podLogsDir``, containerd's root and state, the CDI dir) except what the kubelet writes to
its fixed paths: a link per container in /var/log/containers, removed at the end for the links
into this root, and its device plugin socket dir /var/lib/kubelet/device-plugins, removed at
the end when the host had none before; mounts under the root are unmounted. The pod logs have
a dir of their own because kubelets sharing /var/log/pods remove each other's: a kubelet's log
GC removes the folders of pods it does not know, and a shared teardown could only remove by
age.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import podman
from tests.k8scluster import Release, binary_dir, containerd_dir

__all__ = ["BUSYBOX_IMAGE", "RealKubelet", "missing", "real_kubelet"]

KUBELET = "kubelet"
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
BUSYBOX_IMAGE = "localhost/busybox:dralet"
PAUSE_IMAGE = "localhost/pause:dralet"
READY_WITHIN = 90.0


def missing(release: Release) -> str:
    """Why a real kubelet of ``release`` cannot run here ('' when it can)."""
    for folder, names in (
        (binary_dir(release), (KUBELET,)),
        (containerd_dir(), CONTAINERD_BINARIES),
    ):
        absent = [b for b in names if not (folder / b).is_file()]
        if absent:
            return f"{', '.join(absent)} not built in {folder} (make k8s)"
    if os.geteuid() != 0:
        return "a kubelet and containerd need root"
    if shutil.which("runc") is None:
        return "runc is not installed"
    state = podman.available()
    if not state:
        return f"the local images are made with podman: {state.reason}"
    return ""


def _node_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this picks the outgoing address
        return str(s.getsockname()[0])


def _images(root: Path, ctr: list[str]) -> None:
    rootfs = podman.ensure_rootfs()
    archive = root / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(rootfs, arcname=".")
    for name, command in (
        (BUSYBOX_IMAGE, ["/bin/sh"]),
        (PAUSE_IMAGE, ["/bin/sleep", "2147483647"]),
    ):
        subprocess.run(
            ["podman", "import", "--change", f"CMD {json.dumps(command)}", str(archive), name],
            check=True,
            capture_output=True,
        )
        saved = root / f"{name.rsplit('/', 1)[1].replace(':', '-')}.tar"
        subprocess.run(
            ["podman", "save", "--format", "oci-archive", "-o", str(saved), name],
            check=True,
            capture_output=True,
        )
        subprocess.run([*ctr, "images", "import", str(saved)], check=True, capture_output=True)


@dataclass
class RealKubelet:
    node_name: str
    root: Path
    registry_dir: Path
    plugins_dir: Path
    cdi_dir: Path
    kubelet: subprocess.Popen[bytes]
    containerd: subprocess.Popen[bytes]

    def log(self) -> str:
        return (self.root / "kubelet.log").read_text(errors="replace")[-4000:]

    @property
    def pod_logs_dir(self) -> Path:
        """This kubelet's ``podLogsDir``: a folder ``<namespace>_<pod>_<uid>`` per pod."""
        return self.root / POD_LOGS

    def container_log(self, namespace: str, pod: str, container: str) -> str:
        """What the container wrote, from the kubelet's log files."""
        for directory in self.pod_logs_dir.glob(f"{namespace}_{pod}_*"):
            for path in sorted((directory / container).glob("*.log")):
                lines = path.read_text(errors="replace").splitlines()
                return "\n".join(line.split(" ", 3)[-1] for line in lines)
        return ""


LOOPBACK_NETWORK = {"cniVersion": "1.0.0", "name": "lo", "plugins": [{"type": "loopback"}]}
"""The default pod network: loopback only (pods that talk to anything use the host's)."""


def _write_configs(
    root: Path, node_ip: str, network: Mapping[str, Any] = LOOPBACK_NETWORK, port: int = 0
) -> tuple[Path, Path]:
    cni = root / "cni"
    cni.mkdir()
    (cni / "10-pods.conflist").write_text(json.dumps(network))
    containerd = root / "containerd.toml"
    containerd.write_text(
        f"""version = 3
root = "{root}/containerd/root"
state = "{root}/containerd/state"
[grpc]
  address = "{root}/containerd.sock"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{PAUSE_IMAGE}"
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["{root}/cdi"]
  restrict_oom_score_adj = true
  # Pod network namespaces under this root (unmounted with it), not /var/run/netns.
  netns_mounts_under_state_dir = true
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "{shutil.which("runc")}"
  SystemdCgroup = false
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "{cni}"
"""
    )
    kubelet = root / "kubelet.yaml"
    kubelet.write_text(
        json.dumps(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "failSwapOn": False,
                "failCgroupV1": False,
                "cgroupDriver": "cgroupfs",
                "cgroupsPerQOS": False,
                "enforceNodeAllocatable": [],
                "containerRuntimeEndpoint": f"unix://{root}/containerd.sock",
                "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
                "authorization": {"mode": "AlwaysAllow"},
                "port": port,
                "readOnlyPort": 0,
                "healthzPort": 0,
                "resolvConf": "",
                "evictionHard": {},
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "address": node_ip,
                # KubeletConfiguration.podLogsDir: absolute, default /var/log/pods
                # (k8s.io/kubernetes@v1.37.2 pkg/kubelet/apis/config/types.go).
                "podLogsDir": str(root / POD_LOGS),
            }
        )
    )
    return containerd, kubelet


def _unmount_under(root: Path) -> None:
    with open("/proc/self/mounts") as mounts:
        targets = [line.split()[1] for line in mounts if line.split()[1].startswith(str(root))]
    for target in sorted(targets, reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)


def _wait_socket(path: Path, process: subprocess.Popen[bytes], within: float) -> None:
    deadline = time.monotonic() + within
    while not path.is_socket():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{path} never appeared (exit {process.poll()})")
        time.sleep(0.1)


@contextlib.contextmanager
def real_kubelet(
    admin_kubeconfig: Path,
    *,
    release: Release | None = None,
    node_name: str = "kubelet-node",
    network: Mapping[str, Any] = LOOPBACK_NETWORK,
    command_prefix: Sequence[str] = (),
    port: int = 0,
) -> Iterator[RealKubelet]:
    """containerd and a kubelet of ``release`` (default: the first the k8s tests run on)
    registered as ``node_name``, pods on the CNI ``network`` (a conflist), both started
    through ``command_prefix`` (e.g. an ``nsenter`` into a mount namespace of the node's
    own), the kubelet's API on ``port`` (0: the kubelet's default, 10250,
    k8s.io/kubernetes@v1.37.2 pkg/kubelet/apis/config/v1beta1/defaults.go; two kubelets on
    one machine need their own); both stopped, their mounts and files removed, on exit."""
    folder = binary_dir(release)
    runtime = containerd_dir()
    root = Path(tempfile.mkdtemp(prefix="dralet-kubelet-"))
    # containerd finds its runc shim on the PATH.
    env = {**os.environ, "PATH": f"{runtime}:{os.environ['PATH']}"}
    containerd: subprocess.Popen[bytes] | None = None
    kubelet: subprocess.Popen[bytes] | None = None
    # The outermost of the kubelet's fixed dirs the host lacks: all of it is this kubelet's.
    made_on_host = next((d for d in DEVICE_PLUGIN_DIRS if not os.path.lexists(d)), None)
    try:
        (root / "cdi").mkdir()
        node_ip = _node_ip()
        containerd_config, kubelet_config = _write_configs(root, node_ip, network, port)
        with open(root / "containerd.log", "wb") as out:
            containerd = subprocess.Popen(
                [*command_prefix, str(runtime / "containerd"), "--config", str(containerd_config)],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        _wait_socket(root / "containerd.sock", containerd, 30)
        ctr = [str(runtime / "ctr"), "-a", str(root / "containerd.sock"), "-n", "k8s.io"]
        _images(root, ctr)
        with open(root / "kubelet.log", "wb") as out:
            kubelet = subprocess.Popen(
                [
                    *command_prefix,
                    str(folder / KUBELET),
                    "--config", str(kubelet_config),
                    "--kubeconfig", str(admin_kubeconfig),
                    "--root-dir", str(root / "kubelet"),
                    "--cert-dir", str(root / "kubelet" / "pki"),
                    "--hostname-override", node_name,
                    "--node-ip", node_ip,
                ],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        yield RealKubelet(
            node_name=node_name,
            root=root,
            registry_dir=root / "kubelet" / "plugins_registry",
            plugins_dir=root / "kubelet" / "plugins",
            cdi_dir=root / "cdi",
            kubelet=kubelet,
            containerd=containerd,
        )
    finally:
        for process in (kubelet, containerd):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        subprocess.run(["pkill", "-f", f"containerd-shim-runc-v2.*{root}"], check=False)
        _unmount_under(root)
        for link in _entries(CONTAINER_LINKS):
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(f"{root}/"):
                    link.unlink()
        if made_on_host is not None:
            shutil.rmtree(made_on_host, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


POD_LOGS = "pod-logs"
CONTAINER_LINKS = Path("/var/log/containers")
"""Where a kubelet links each container's log, whatever its ``podLogsDir``
(legacyContainerLogsDir, k8s.io/kubernetes@v1.37.2 pkg/kubelet/kuberuntime/legacy.go)."""
DEVICE_PLUGIN_DIRS = (Path("/var/lib/kubelet"), Path("/var/lib/kubelet/device-plugins"))
"""The device manager's socket dir (a fixed path, whatever the root dir), with its parent."""


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except FileNotFoundError:
        return []
