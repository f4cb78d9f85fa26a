"""A node the chart can run on: a real kubelet and containerd (tests/realkubelet.py) whose
pods get a network of their own, the driver image loaded into its containerd, and the
``kubernetes`` Service reachable from its pods.

What the chart's pods need from a node, and how it is given here:
- a pod network: a CNI bridge per node (its own bridge name and subnet, the IPAM state
  in this node's folder), so the kubelet probes the driver's health port on its pod IP;
- the API server at the ``kubernetes`` Service (``KUBERNETES_SERVICE_HOST``, what
  ``--in-cluster`` dials): the test control plane listens on loopback only and no
  kube-proxy runs, so one DNAT rule per node plays kube-proxy for that one Service, from
  this node's bridge to the loopback port (``route_localnet`` on the bridge lets the
  kernel route to 127.0.0.1 from it). Rule, sysctl and bridge are removed on exit;
- the images: the driver image (``podman save`` then ``ctr images import``, as
  docs/install.md says for containerd) and the example's ``busybox:1.36``, tagged from the
  local busybox, with no registry.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import realkubelet
from tests.k8scluster import containerd_dir, free_port

__all__ = ["InstallNode", "install_node"]

SERVICE_IP = "10.0.0.1"
"""The ``kubernetes`` Service's ClusterIP: the first address of the test control plane's
--service-cluster-ip-range (tests/k8scluster.py)."""
SERVICE_PORT = 443
POD_SUBNETS = ipaddress.IPv4Network("10.244.0.0/16")
"""Node n's pods get the n-th /24 of this."""
STOP_TIMEOUT_S = 30
STARTED_WITHIN_S = 60
POLL_S = 0.2
UP_MARKERS = {
    "kubelet": b"Starting kubelet main sync loop",
    "containerd": b"containerd successfully booted",
}
"""What each writes to its log once it serves (the kubelet's: k8s.io/kubernetes@v1.37.2
pkg/kubelet/kubelet.go, syncLoop's start; containerd 2's, seen in its log)."""
EXAMPLE_IMAGE = "docker.io/library/busybox:1.36"
"""The image the chart's example pod names (templates/examples.yaml)."""


@dataclass
class InstallNode:
    kubelet: realkubelet.RealKubelet
    bridge: str
    subnet: ipaddress.IPv4Network
    view: Path | None = None
    """Where the node's pods see its root, when not at its real path (``install_node``'s
    ``shared_view``)."""
    holder: subprocess.Popen[bytes] | None = None
    """The process keeping the node's own mount namespace, with ``shared_view``."""
    restarted: list[subprocess.Popen[bytes]] = field(default_factory=list)
    """Processes started by ``restart``: stopped by ``install_node`` on exit (the
    originals are real_kubelet's to stop)."""

    def restart(self, which: str) -> None:
        """Stop the node's ``kubelet`` or ``containerd`` and start it again with the same
        command line, returning once it says it is up; containers and their shims keep
        running meanwhile."""
        old: subprocess.Popen[bytes] = getattr(self.kubelet, which)
        old.terminate()
        old.wait(timeout=STOP_TIMEOUT_S)
        log = self.kubelet.root / f"{which}.log"
        offset = log.stat().st_size
        # containerd finds its runc shim on the PATH.
        env = {**os.environ, "PATH": f"{containerd_dir()}:{os.environ['PATH']}"}
        with open(log, "ab") as out:
            new = subprocess.Popen(
                old.args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.restarted.append(new)
        setattr(self.kubelet, which, new)
        deadline = time.monotonic() + STARTED_WITHIN_S
        while UP_MARKERS[which] not in log.read_bytes()[offset:]:
            if new.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{which} did not come back (exit {new.poll()})")
            time.sleep(POLL_S)

    @property
    def name(self) -> str:
        return self.kubelet.node_name

    def ctr_argv(self) -> list[str]:
        sock = self.kubelet.root / "containerd.sock"
        return [str(containerd_dir() / "ctr"), "-a", str(sock), "-n", "k8s.io"]

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.ctr_argv(), *args], check=True, capture_output=True, text=True)

    def chart_values(self) -> list[str]:
        """``--set`` arguments pointing the chart's host paths into this node's root."""
        k = self.kubelet
        root = self.view or k.root
        return [
            "--set", f"kubeletPaths.pluginsDir={root / k.plugins_dir.relative_to(k.root)}",
            "--set", f"kubeletPaths.registryDir={root / k.registry_dir.relative_to(k.root)}",
            "--set", f"cdiDir={root / k.cdi_dir.relative_to(k.root)}",
        ]  # fmt: skip

    def read_in_node(self, path: Path) -> str:
        """A file as the node's own processes see it (a volume the kubelet mounted)."""
        prefix = _nsenter(self.holder) if self.holder is not None else []
        return subprocess.run(
            [*prefix, "cat", str(path)], check=True, capture_output=True, text=True
        ).stdout

    def load_image(self, archive: Path, name: str) -> None:
        """``ctr images import`` of an OCI archive, then the name the chart asks for."""
        self.ctr("images", "import", str(archive))
        imported = _canonical(f"localhost/{name}")
        self.ctr("images", "tag", "--force", imported, _canonical(name))


def _canonical(name: str) -> str:
    first = name.split("/", 1)[0]
    if "/" not in name:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


def _network(bridge: str, subnet: ipaddress.IPv4Network, ipam_dir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": bridge,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(subnet)}]],
                    # Through the bridge's address (isGateway): the Service IP included.
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def _nsenter(holder: subprocess.Popen[bytes]) -> list[str]:
    return ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", "--"]


@contextlib.contextmanager
def _mount_namespace() -> Iterator[subprocess.Popen[bytes]]:
    """A process holding a private mount namespace of its own."""
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sleep", "infinity"],
        start_new_session=True,
    )
    try:
        mine = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + STARTED_WITHIN_S
        while os.readlink(f"/proc/{holder.pid}/ns/mnt") == mine:
            if holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("unshare did not make a mount namespace")
            time.sleep(POLL_S)
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _run(*args: str) -> None:
    done = subprocess.run(list(args), check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")


@contextlib.contextmanager
def _service_proxy(bridge: str, api_url: str) -> Iterator[None]:
    port = urllib.parse.urlsplit(api_url).port
    rule = [
        "PREROUTING", "-i", bridge, "-d", SERVICE_IP, "-p", "tcp",
        "--dport", str(SERVICE_PORT), "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}",
    ]  # fmt: skip
    # A run killed before its teardown (a cancelled CI job) leaves its bridge and rule behind.
    subprocess.run(["ip", "link", "delete", bridge], check=False, capture_output=True)
    stale = ["iptables", "-t", "nat", "-D", *rule]
    while subprocess.run(stale, check=False, capture_output=True).returncode == 0:
        pass
    _run("ip", "link", "add", bridge, "type", "bridge")
    try:
        _run("ip", "link", "set", bridge, "up")
        _run("sysctl", "-q", "-w", f"net.ipv4.conf.{bridge}.route_localnet=1")
        _run("iptables", "-t", "nat", "-A", *rule)
        try:
            yield
        finally:
            subprocess.run(["iptables", "-t", "nat", "-D", *rule], check=False)
    finally:
        subprocess.run(["ip", "link", "delete", bridge], check=False, capture_output=True)


def _stop_pods(node: InstallNode) -> None:
    """SIGKILL every container left (a test that failed before its ``helm uninstall``):
    with the kubelet stopped first, so none is started again; real_kubelet stops only
    containerd and the shims, which would leave the containers' processes running."""
    kubelet = node.kubelet.kubelet
    if kubelet.poll() is None:
        kubelet.terminate()
        kubelet.wait(timeout=STOP_TIMEOUT_S)
    if node.kubelet.containerd.poll() is None:
        for task in node.ctr("tasks", "ls", "--quiet").stdout.split():
            subprocess.run(
                [*node.ctr_argv(), "tasks", "kill", "--all", "--signal", "SIGKILL", task],
                check=False,
                capture_output=True,
            )
    _kill_node_processes(node.name)


def _kill_node_processes(node_name: str) -> None:
    """SIGKILL any container process still running for ``node_name`` (a driver whose
    shim went first): left running, it would go on calling the session's API server
    with the driver's ServiceAccount, in the next tests' audit logs."""
    flag = f"--node-name={node_name}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if flag in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


@contextlib.contextmanager
def install_node(
    admin_kubeconfig: Path,
    api_url: str,
    *,
    index: int,
    images: dict[str, Path],
    shared_view: Path | None = None,
) -> Iterator[InstallNode]:
    """Node ``install-node-<index>`` with its own bridge and subnet; ``images`` maps an
    image name (as ``podman save`` wrote it, without ``localhost/``) to its archive.

    With ``shared_view`` (an empty directory), the node's kubelet and containerd run in
    a mount namespace of their own where that directory is the node's root: several
    nodes on one machine then take the same chart values (one DaemonSet template) and
    each pod's hostPaths land in its own node's root."""
    bridge = f"dralet-br{index}"
    subnet = list(POD_SUBNETS.subnets(new_prefix=24))[index]
    with contextlib.ExitStack() as stack:
        ipam = stack.enter_context(tempfile.TemporaryDirectory(prefix="dralet-ipam-"))
        stack.enter_context(_service_proxy(bridge, api_url))
        holder = stack.enter_context(_mount_namespace()) if shared_view is not None else None
        kubelet = stack.enter_context(
            realkubelet.real_kubelet(
                admin_kubeconfig,
                node_name=f"install-node-{index}",
                network=_network(bridge, subnet, Path(ipam)),
                command_prefix=_nsenter(holder) if holder is not None else (),
                port=free_port(),
            )
        )
        if holder is not None and shared_view is not None:
            # The kubelet and containerd share the holder's namespace: they see it at once.
            _run(*_nsenter(holder), "mount", "--bind", str(kubelet.root), str(shared_view))
        node = InstallNode(
            kubelet=kubelet, bridge=bridge, subnet=subnet, view=shared_view, holder=holder
        )
        try:
            for name, archive in images.items():
                node.load_image(archive, name)
            node.ctr("images", "tag", "--force", realkubelet.BUSYBOX_IMAGE, EXAMPLE_IMAGE)
            yield node
        finally:
            _stop_pods(node)
            for process in node.restarted:
                if process.poll() is None:
                    process.terminate()
                    process.wait(timeout=STOP_TIMEOUT_S)
