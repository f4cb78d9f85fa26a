"""The configuration file: what it accepts, and one line naming file and line for what
it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from dralet.drivers.hostdev import ConfigError, load_config
from dralet.drivers.hostdev.config import DEFAULT_NAMING, AttributeSource

EXAMPLES = Path(__file__).parents[2] / "deploy" / "hostdev"
GROUP = "groups:\n  - name: serial\n    match: {paths: [/dev/ttyUSB*]}\n"


def test_a_full_group_reads_as_written() -> None:
    config = load_config(
        GROUP
        + "    naming: [udev:ID_SERIAL, path]\n"
        + "    share: 4\n    sharing: slots\n"
        + "    containerPath: /dev/serial/{basename}\n"
        + "    permissions: rw\n    fileMode: 0o600\n    uid: 1000\n    gid: 20\n"
        + "    attributes:\n      vendor: {udev: ID_VENDOR_ID}\n      speed: 115200\n"
        + "    capacity:\n      size: {sysfs: size, scale: 512}\n      lanes: '4'\n"
        + "    mounts: [{hostPath: /etc/udev, containerPath: /etc/udev}]\n"
        + "    env: {SERIAL_BAUD: '115200'}\n",
        "serial.yaml",
    )
    (group,) = config.groups
    assert group.naming == ["udev:ID_SERIAL", "path"]
    assert (group.share, group.sharing, group.file_mode, group.uid) == (4, "slots", 0o600, 1000)
    assert group.attributes["vendor"] == AttributeSource(udev="ID_VENDOR_ID")
    assert group.attributes["speed"] == 115200
    assert group.capacity["size"] == AttributeSource(sysfs="size", scale=512)
    assert group.mounts[0].read_only is True
    assert config.sysfs_root == Path("/sys")


def test_defaults_are_stable_names_and_exclusive_devices() -> None:
    (group,) = load_config(GROUP).groups
    assert group.naming == list(DEFAULT_NAMING)
    assert "index" not in " ".join(DEFAULT_NAMING)
    assert (group.share, group.permissions, group.container_path) == (1, "rw", None)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("groups: [", "f.yaml:1: not YAML"),
        ("- a\n", "f.yaml:1: expected a mapping"),
        ("groups: []\n", "f.yaml:1: groups: List should have at least 1 item"),
        (GROUP + "    bogus: 1\n", "f.yaml:4: groups.0.bogus: unknown field"),
        ("groups:\n  - name: a\n", "f.yaml:2: groups.0.match: Field required"),
        (
            "groups:\n  - name: Serial\n    match: {paths: [/dev/x]}\n",
            "f.yaml:2: groups.0.name: 'Serial': must be a DNS label",
        ),
        (
            "groups:\n  - name: a\n    match: {paths: [dev/x]}\n",
            "f.yaml:3: groups.0.match.paths: 'dev/x': device paths must be absolute",
        ),
        (GROUP + "    share: 0\n", "f.yaml:4: groups.0.share: Input should be greater than"),
        (GROUP + "    permissions: rwx\n", "f.yaml:4: groups.0.permissions: 'rwx': expected"),
        (GROUP + "    naming: [index]\n", "f.yaml:4: groups.0.naming: 'index': expected"),
        (
            GROUP + "    containerPath: /dev/{n}\n",
            "f.yaml:4: groups.0.containerPath: '/dev/{n}': unknown placeholder",
        ),
        (
            GROUP + "    attributes:\n      x: {udev: A, sysfs: b}\n",
            "f.yaml:5: groups.0.attributes.x: give exactly one of udev or sysfs",
        ),
        (
            GROUP + "    attributes:\n      x: {sysfs: ../../etc/shadow}\n",
            "f.yaml:5: groups.0.attributes.x: sysfs '../../etc/shadow': expected a path relative",
        ),
        (
            GROUP + "    attributes:\n      'bad name': 1\n",
            "f.yaml:4: groups.0.attributes: attribute 'bad name'",
        ),
        (
            GROUP + "    attributes:\n      a.com/b/c: 1\n",
            "f.yaml:4: groups.0.attributes: attribute 'a.com/b/c': must not contain more than one",
        ),
        (
            GROUP + "    capacity: {a.com/b/size: 1}\n",
            "f.yaml:4: groups.0.capacity: capacity 'a.com/b/size': must not contain more than one",
        ),
        (GROUP + "    capacity: {size: 12Q}\n", "f.yaml:4: groups.0.capacity: capacity 'size'"),
        (GROUP + "    env: {'A-B': x}\n", "f.yaml:4: groups.0.env: 'A-B': not an environment"),
        (
            GROUP + "    share: 2\n    capacity: {shares: '2'}\n",
            "f.yaml:2: groups.0: capacity 'shares' is the driver's own",
        ),
        (GROUP + GROUP.removeprefix("groups:\n"), "f.yaml:1: groups: group name 'serial' is used"),
        ("rescanSeconds: 0\n" + GROUP, "f.yaml:1: rescanSeconds: Input should be greater"),
    ],
)
def test_a_bad_file_is_one_line_with_file_and_line(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(text, "f.yaml")
    message = str(caught.value)
    assert message.startswith(error), message
    assert "\n" not in message


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.config.yaml")), ids=lambda p: p.name)
def test_the_shipped_example_configs_load(example: Path) -> None:
    config = load_config(example.read_text(), str(example))
    assert config.groups


def test_examples_cover_the_promised_device_kinds() -> None:
    names = {p.name for p in EXAMPLES.glob("*.config.yaml")}
    assert {
        "loop.config.yaml",
        "fuse.config.yaml",
        "kvm.config.yaml",
        "serial.config.yaml",
    } <= names
