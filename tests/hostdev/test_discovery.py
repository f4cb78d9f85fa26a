"""Discovery: which nodes a group takes, and names that survive reboots and re-plugs."""

from __future__ import annotations

from dralet.drivers.hostdev import load_config
from dralet.drivers.hostdev.nodes import discover
from tests.hostdev.fakehost import FakeHost

SERIAL = """\
  - name: serial
    match: {{paths: ["{dev}/ttyUSB*"], type: char, udev: {{ID_BUS: usb}}}}
    attributes:
      vendor: {{udev: ID_VENDOR_ID}}
      serial: {{udev: ID_SERIAL_SHORT}}
      lanes: {{sysfs: lanes, type: int}}
    capacity:
      buffer: {{sysfs: buffer_kib, scale: 1024}}
"""


def _usb(port: str, serial: str) -> dict[str, str]:
    return {
        "ID_BUS": "usb",
        "ID_PATH": f"pci-0000:00:14.0-usb-0:{port}:1.0",
        "ID_SERIAL": f"FTDI_FT232R_{serial}",
        "ID_SERIAL_SHORT": serial,
        "ID_VENDOR_ID": "0403",
    }


def test_names_follow_the_usb_port_not_the_order_the_kernel_numbered_them(host: FakeHost) -> None:
    host.node("ttyUSB0", (1, 3), udev=_usb("2", "A1"))
    host.node("ttyUSB1", (1, 5), udev=_usb("3", "B2"))
    config = load_config(host.config(SERIAL.format(dev=host.dev)))
    before = {d.node.path.rsplit("/", 1)[1]: name for name, d in discover(config).devices.items()}
    # A reboot enumerates the adapters the other way round: the names stay with the ports.
    host.unplug("ttyUSB0")
    host.unplug("ttyUSB1")
    host.node("ttyUSB0", (1, 5), udev=_usb("3", "B2"))
    host.node("ttyUSB1", (1, 3), udev=_usb("2", "A1"))
    after = {d.node.path.rsplit("/", 1)[1]: name for name, d in discover(config).devices.items()}
    assert before["ttyUSB0"] == after["ttyUSB1"] == "serial-pci-0000-00-14-0-usb-0-2-1-0"
    assert before["ttyUSB1"] == after["ttyUSB0"] == "serial-pci-0000-00-14-0-usb-0-3-1-0"


def test_a_node_is_published_with_what_stat_udev_and_sysfs_say(host: FakeHost) -> None:
    host.node(
        "ttyUSB0",
        (1, 7),
        mode=0o640,
        udev=_usb("2", "A1"),
        sysfs="pci0000:00/0000:00:14.0/usb1/1-2/ttyUSB0",
        attributes={"lanes": "4", "buffer_kib": "64"},
    )
    config = load_config(host.config(SERIAL.format(dev=host.dev)))
    (device,) = discover(config).devices.values()
    assert (device.node.type, device.node.major, device.node.minor) == ("char", 1, 7)
    assert device.node.mode == 0o640
    path = str(host.dev / "ttyUSB0")
    # An attribute string holds at most 64 characters: a longer path is left out.
    assert device.attributes == {
        "group": "serial",
        "type": "char",
        "major": 1,
        "minor": 7,
        **({"path": path} if len(path) <= 64 else {}),
        "vendor": "0403",
        "serial": "A1",
        "lanes": 4,
    }
    assert device.capacity == {"buffer": "65536"}


def test_udev_and_sysfs_rules_narrow_the_match(host: FakeHost) -> None:
    host.node("ttyUSB0", (1, 3), udev=_usb("2", "A1"))
    host.node("ttyUSB1", (1, 5), udev={"ID_BUS": "pci", "ID_PATH": "pci-1"})
    host.node("ttyUSB2", (1, 7))  # no udev entry at all
    config = load_config(host.config(SERIAL.format(dev=host.dev)))
    assert [d.node.path for d in discover(config).devices.values()] == [str(host.dev / "ttyUSB0")]


def test_naming_falls_back_from_udev_to_sysfs_to_the_node_name(host: FakeHost) -> None:
    host.node("a", (1, 3), udev={"ID_PATH": "port-1"})
    host.node("b", (1, 5), sysfs="pci0000:00/0000:00:1f.0/tty/ttyS0")
    host.node("c", (1, 7), sysfs="virtual/misc/c")
    host.node("d", (1, 8))
    config = load_config(host.config(f"  - name: n\n    match: {{paths: ['{host.dev}/*']}}\n"))
    names = {d.node.path.rsplit("/", 1)[1]: name for name, d in discover(config).devices.items()}
    assert names == {
        "a": "n-port-1",
        "b": "n-pci0000-00-0000-00-1f-0-tty-ttys0",
        "c": "n-c",  # a virtual device is named by the kernel alone
        "d": "n-d",
    }


def test_a_long_stable_id_keeps_its_tail_and_a_hash(host: FakeHost) -> None:
    deep = "/".join(f"level{i}" for i in range(12))
    host.node("x", (1, 3), sysfs=f"pci0000:00/{deep}/tty/ttyUSB7")
    host.node("y", (1, 5), sysfs=f"pci0000:01/{deep}/tty/ttyUSB7")
    config = load_config(
        host.config(f"  - name: n\n    match: {{paths: ['{host.dev}/*']}}\n    naming: [sysfs]\n")
    )
    names = sorted(discover(config).devices)
    assert len(names) == 2 and all(len(n) <= 63 for n in names)
    assert all(n.startswith("n-") and "ttyusb7" in n for n in names)
    assert names[0] != names[1], "the same tail, told apart by the hash of the whole path"


def test_two_nodes_with_one_name_are_both_left_out_and_said(host: FakeHost) -> None:
    host.node("a", (1, 3), udev={"ID_SERIAL": "same"})
    host.node("b", (1, 5), udev={"ID_SERIAL": "same"})
    host.node("c", (1, 7), udev={"ID_SERIAL": "other"})
    config = load_config(
        host.config(
            f"  - name: n\n    match: {{paths: ['{host.dev}/*']}}\n    naming: [udev:ID_SERIAL]\n"
        )
    )
    found = discover(config)
    assert sorted(found.devices) == ["n-other"]
    (problem,) = found.problems
    assert "all named n-same; left out" in problem


def test_a_node_two_groups_match_goes_to_the_first(host: FakeHost) -> None:
    host.node("a", (1, 3))
    config = load_config(
        host.config(
            f"  - name: one\n    match: {{paths: ['{host.dev}/a']}}\n"
            f"  - name: two\n    match: {{paths: ['{host.dev}/*']}}\n"
        )
    )
    found = discover(config)
    assert sorted(found.devices) == ["one-a"]
    assert any("already taken by group one" in p for p in found.problems)


def test_regular_files_and_type_mismatches_are_not_devices(host: FakeHost) -> None:
    host.node("a", (1, 3))
    (host.dev / "plain").write_text("not a device")
    config = load_config(
        host.config(f"  - name: n\n    match: {{paths: ['{host.dev}/*'], type: block}}\n")
    )
    assert discover(config).devices == {}


def test_a_shared_device_is_one_device_or_slots(host: FakeHost) -> None:
    host.node("fuse", (1, 3))
    config = load_config(
        host.config(
            f"  - name: f\n    match: {{paths: ['{host.dev}/fuse']}}\n    share: 3\n"
            f"  - name: s\n    match: {{paths: ['{host.dev}/fuse']}}\n    share: 3\n"
            "    sharing: slots\n"
        )
    )
    assert sorted(discover(config).devices) == ["f-fuse"]
    slots = load_config(
        host.config(
            f"  - name: s\n    match: {{paths: ['{host.dev}/fuse']}}\n    share: 3\n"
            "    sharing: slots\n"
        )
    )
    assert sorted(discover(slots).devices) == ["s-fuse-s0", "s-fuse-s1", "s-fuse-s2"]
