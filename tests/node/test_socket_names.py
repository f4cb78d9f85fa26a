"""Socket names of a rolling update stay under the 108-byte unix path limit, named as the
Go kubelet-plugin helper v0.38 names them: a 63-character driver name and a pod UID under
paths as long as the kubelet's own still bind, register and serve."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dralet.drivers.example import SimulatedGPUs
from dralet.kubelet import KubeletEmulator
from dralet.node import sockets
from dralet.node.runner import NodeServer
from dralet.testing.claims import NODE, MemoryClaims
from tests.node.conftest import make_settings

LONG_DRIVER = "a23456789.b23456789.c23456789.d23456789.e23456789.f23456789.ghi"
POD_UID = "5f1c9a77-2b1e-4d3a-9c55-0d8e6f1a2b3c"
# The kubelet's own directories: /var/lib/kubelet/plugins/<driver> and
# /var/lib/kubelet/plugins_registry.
PLUGINS_DIR_LENGTH = len("/var/lib/kubelet/plugins/")
REGISTRY_DIR_LENGTH = len("/var/lib/kubelet/plugins_registry")
# base64url(SHA-256(uid)[:8]) and base64url(SHA-256(driver NUL uid)[:16]), computed with
# Go's crypto/sha256 and encoding/base64.RawURLEncoding.
UID_HASH = "GYl5qmqbJw8"
DRIVER_UID_HASH = "WxlDHGCrjRGHFBC9QLfJeQ"


def padded(base: Path, length: int) -> Path:
    """A directory under ``base`` whose path is exactly ``length`` bytes long."""
    missing = length - len(str(base)) - 1
    assert missing > 0
    return base / ("d" * missing)


@pytest.fixture
def short_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dralet-") as root:
        yield Path(root)


def test_names_stay_readable_while_they_fit() -> None:
    assert sockets.plugin_socket_name(Path("/p"), "") == "dra.sock"
    assert sockets.plugin_socket_name(Path("/p"), POD_UID) == f"dra-{POD_UID}.sock"
    assert sockets.registration_socket_name(Path("/r"), "gpu.example.com", "") == (
        "gpu.example.com-reg.sock"
    )
    assert sockets.registration_socket_name(Path("/r"), "gpu.example.com", POD_UID) == (
        f"gpu.example.com-{POD_UID}-reg.sock"
    )


def test_long_names_are_hashed_as_the_go_helper_hashes_them() -> None:
    plugins = Path("/var/lib/kubelet/plugins") / LONG_DRIVER
    registry = Path("/var/lib/kubelet/plugins_registry")
    assert sockets.plugin_socket_name(plugins, POD_UID) == f"dra-{UID_HASH}"
    assert sockets.registration_socket_name(registry, LONG_DRIVER, POD_UID) == (
        f"dra-{DRIVER_UID_HASH}-reg.sock"
    )
    mid = Path("/r")  # the UID does not fit, its hash does
    assert sockets.registration_socket_name(mid, "d" * 60, POD_UID) == (
        f"{'d' * 60}-{UID_HASH}-reg.sock"
    )
    for path in (plugins / f"dra-{UID_HASH}", registry / f"dra-{DRIVER_UID_HASH}-reg.sock"):
        assert len(str(path)) < sockets.UNIX_PATH_MAX


async def test_a_rolling_update_of_a_long_named_driver_binds_and_registers(
    short_root: Path,
) -> None:
    plugins = padded(short_root, PLUGINS_DIR_LENGTH - 1) / LONG_DRIVER
    registry = padded(short_root / "r", REGISTRY_DIR_LENGTH)
    registry.parent.mkdir()
    assert len(str(plugins)) == len(f"/var/lib/kubelet/plugins/{LONG_DRIVER}")
    old_settings = make_settings(
        short_root, driver_name=LONG_DRIVER, plugin_dir=plugins, registry_dir=registry
    )
    new_settings = make_settings(
        short_root,
        driver_name=LONG_DRIVER,
        plugin_dir=plugins,
        registry_dir=registry,
        pod_uid=POD_UID,
    )
    assert new_settings.dra_socket == plugins / f"dra-{UID_HASH}"
    assert new_settings.registration_socket == registry / f"dra-{DRIVER_UID_HASH}-reg.sock"
    backend = SimulatedGPUs(state_dir=short_root / "gpus", node_name=NODE, count=1)
    old = NodeServer(old_settings, backend, claims=MemoryClaims())
    new = NodeServer(new_settings, backend, claims=MemoryClaims())
    kubelet = KubeletEmulator(registry, kubelet_version="1.38")
    await new.start()  # the new instance alone: found by its name, not its file name
    try:
        found = await kubelet.wait_for_plugin(LONG_DRIVER, within=5.0)
        assert found.registration_socket == new_settings.registration_socket
        await old.start()
        try:
            for settings in (old_settings, new_settings):
                plugin = await kubelet.register(settings.registration_socket)
                assert plugin.info.name == LONG_DRIVER
                assert plugin.endpoint == str(settings.dra_socket)
                assert (await plugin.unprepare([])).kubelet_error == ""
            assert sorted(p.name for p in kubelet.sockets()) == sorted(
                [f"{LONG_DRIVER}-reg.sock", f"dra-{DRIVER_UID_HASH}-reg.sock"]
            )
        finally:
            await kubelet.close()
            await old.stop()
    finally:
        await new.stop()
    assert not new_settings.dra_socket.exists()
    assert not old_settings.dra_socket.exists()
