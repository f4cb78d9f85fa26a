"""Qualified CDI names: the CDI spec's rules plus the guards runtimes need."""

from __future__ import annotations

import pytest

from dralet.cdi import names, spec


@pytest.mark.parametrize(
    "device",
    [
        "vendor.com/gpu=dev0",
        "Example.COM/GPU=Dev0",
        "my-vendor_x.example.com/gpu-class_1=dev0",
        "example.com/gpu=claim-uid_1.2:3",
        "example.com/gpu=0",
        "gpu.example.com/claim=6f1d2c3b-0000-4000-8000-000000000001-gpu-0",
        "example.com/g.pu=dev0",  # dotted class: valid, needs spec 0.6.0
    ],
)
def test_valid_names(device: str) -> None:
    assert str(names.parse_qualified_name(device)) == device


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("", "not a qualified"),
        ("/dev/nvidia0", "not a qualified"),
        ("vendor.com/gpu", "missing '='"),
        ("vendor.com=dev0", "expected vendor/class"),
        ("x/gpu=dev0", "at least 2 characters"),
        ("vendor.com/g=dev0", "at least 2 characters"),
        ("1vendor.com/gpu=dev0", "should start with a letter"),
        ("vendor.com-/gpu=dev0", "should end with a letter or digit"),
        ("vendor.com/foo/bar=dev0", "invalid character '/'"),
        ("vendor.com/gpu=-dev0", "should start with a letter or digit"),
        ("vendor.com/gpu=dev0-", "should end with a letter or digit"),
        ("vendor.com/gpu=dev/0", "invalid character '/'"),
        ("vendor.com/gpu=dév0", "invalid character 'é'"),
        ("vendor.com/" + "c" * 64 + "=dev0", "longer than 63"),
    ],
)
def test_invalid_names(device: str, message: str) -> None:
    with pytest.raises(names.CDINameError, match=message):
        names.parse_qualified_name(device)


@pytest.mark.parametrize(
    ("kind", "device_name", "edits", "expected"),
    [
        ("vendor.com/gpu", "dev0", spec.ContainerEdits(env=("A=1",)), "0.3.0"),
        (
            "vendor.com/gpu",
            "dev0",
            spec.ContainerEdits(mounts=(spec.Mount("/a", "/b", type="bind"),)),
            "0.4.0",
        ),
        ("vendor.com/gpu", "0dev", spec.ContainerEdits(env=("A=1",)), "0.5.0"),
        (
            "vendor.com/gpu",
            "dev0",
            spec.ContainerEdits(device_nodes=(spec.DeviceNode("/dev/x", host_path="/dev/null"),)),
            "0.5.0",
        ),
        ("vendor.com/g.pu", "dev0", spec.ContainerEdits(env=("A=1",)), "0.6.0"),
        ("vendor.com/gpu", "dev0", spec.ContainerEdits(additional_gids=(44,)), "0.7.0"),
    ],
)
def test_minimum_version_follows_the_features_used(
    kind: str, device_name: str, edits: spec.ContainerEdits, expected: str
) -> None:
    document = spec.to_json(spec.Spec(kind=kind, devices=(spec.CDIDevice(device_name, edits),)))
    assert document["cdiVersion"] == expected
    assert spec.from_json(document).devices[0].name == device_name


def test_a_spec_claiming_too_low_a_version_is_refused() -> None:
    document = spec.to_json(
        spec.Spec(
            kind="vendor.com/gpu",
            devices=(spec.CDIDevice("0dev", spec.ContainerEdits(env=("A=1",))),),
        )
    )
    document["cdiVersion"] = "0.3.0"
    with pytest.raises(spec.CDISpecError, match=r"at least v0\.5\.0"):
        spec.from_json(document)
    document["cdiVersion"] = "0.5"
    with pytest.raises(spec.CDISpecError, match=r'invalid version "0\.5"'):
        spec.from_json(document)
    document["cdiVersion"] = "0.5.0"
    document["bogus"] = 1
    with pytest.raises(spec.CDISpecError, match="unknown field 'bogus'"):
        spec.from_json(document)
