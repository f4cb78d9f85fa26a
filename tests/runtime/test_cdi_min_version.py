"""The minimum cdiVersion dralet writes, per feature: no runtime needed.

Podman 4.3 on the test machines loads specs up to 0.5.0 only, so the triggers for
0.6.0 and later (annotations, dotted classes, additionalGids) are proven here against
the table of the CDI spec (``SPEC.md``, ``specs-go/version.go``): each feature, at
spec level and at device level, alone and combined; ``to_json`` writes exactly that
version and ``from_json`` refuses a document that declares less.
"""

from __future__ import annotations

from typing import Any

import pytest

from dralet.cdi import spec

KIND = "example.com/gpu"
PLAIN = spec.ContainerEdits(env=("A=1",))


def device(name: str = "gpu0", edits: spec.ContainerEdits = PLAIN, **kwargs: Any) -> spec.CDIDevice:
    return spec.CDIDevice(name, edits, **kwargs)


def with_edits(edits: spec.ContainerEdits, *, spec_level: bool) -> spec.Spec:
    if spec_level:
        return spec.Spec(kind=KIND, devices=(device(),), container_edits=edits)
    return spec.Spec(kind=KIND, devices=(device(edits=edits),))


NODE_WITH_HOST = spec.DeviceNode(path="/dev/x", host_path="/dev/null")
NODE_NO_HOST = spec.DeviceNode(path="/dev/x", type="c", major=1, minor=3)
EDITS_CASES = [
    pytest.param(PLAIN, "0.3.0", id="env"),
    pytest.param(spec.ContainerEdits(device_nodes=(NODE_NO_HOST,)), "0.3.0", id="node-no-host"),
    pytest.param(
        spec.ContainerEdits(mounts=(spec.Mount("/a", "/b", options=("ro", "bind")),)),
        "0.3.0",
        id="mount-options",
    ),
    pytest.param(
        spec.ContainerEdits(hooks=(spec.Hook("createRuntime", "/bin/true"),)), "0.3.0", id="hook"
    ),
    pytest.param(
        spec.ContainerEdits(mounts=(spec.Mount("tmpfs", "/b", type="tmpfs"),)),
        "0.4.0",
        id="mount-type",
    ),
    pytest.param(spec.ContainerEdits(device_nodes=(NODE_WITH_HOST,)), "0.5.0", id="host-path"),
    pytest.param(spec.ContainerEdits(additional_gids=(1000,)), "0.7.0", id="additional-gids"),
    pytest.param(
        spec.ContainerEdits(
            device_nodes=(NODE_WITH_HOST,),
            mounts=(spec.Mount("tmpfs", "/b", type="tmpfs"),),
            additional_gids=(5,),
        ),
        "0.7.0",
        id="highest-wins",
    ),
]


@pytest.mark.parametrize("spec_level", [False, True], ids=["device-edits", "spec-edits"])
@pytest.mark.parametrize(("edits", "expected"), EDITS_CASES)
def test_container_edit_features(
    edits: spec.ContainerEdits, expected: str, spec_level: bool
) -> None:
    value = with_edits(edits, spec_level=spec_level)
    assert spec.minimum_version(value) == expected
    assert spec.to_json(value)["cdiVersion"] == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(spec.Spec(kind=KIND, devices=(device("gpu0"),)), "0.3.0", id="letter-name"),
        pytest.param(spec.Spec(kind=KIND, devices=(device("0"),)), "0.5.0", id="digit-name"),
        pytest.param(
            spec.Spec(kind=KIND, devices=(device("gpu0"), device("7f3a-gpu1"))),
            "0.5.0",
            id="any-device-digit-name",
        ),
        pytest.param(
            spec.Spec(kind=KIND, devices=(device(),), annotations={"a.io/b": "c"}),
            "0.6.0",
            id="spec-annotations",
        ),
        pytest.param(
            spec.Spec(kind=KIND, devices=(device(annotations={"a.io/b": "c"}),)),
            "0.6.0",
            id="device-annotations",
        ),
        pytest.param(
            spec.Spec(kind="example.com/gpu.v2", devices=(device(),)), "0.6.0", id="dotted-class"
        ),
        pytest.param(
            spec.Spec(kind="vendor.example.com/gpu", devices=(device(),)),
            "0.3.0",
            id="dotted-vendor-is-old",
        ),
        pytest.param(
            spec.Spec(
                kind="example.com/gpu.v2",
                devices=(device("0", spec.ContainerEdits(additional_gids=(1,))),),
            ),
            "0.7.0",
            id="dotted-class-and-gids",
        ),
    ],
)
def test_spec_and_device_features(value: spec.Spec, expected: str) -> None:
    assert spec.minimum_version(value) == expected
    document = spec.to_json(value)
    assert document["cdiVersion"] == expected
    assert spec.from_json(document) == value


@pytest.mark.parametrize(
    ("value", "declared"),
    [
        pytest.param(with_edits(PLAIN, spec_level=False), "0.3.0", id="baseline"),
        pytest.param(
            with_edits(spec.ContainerEdits(device_nodes=(NODE_WITH_HOST,)), spec_level=False),
            "0.4.0",
            id="host-path-under-0.4.0",
        ),
        pytest.param(
            spec.Spec(kind=KIND, devices=(device(),), annotations={"a.io/b": "c"}),
            "0.5.0",
            id="annotations-under-0.5.0",
        ),
        pytest.param(
            with_edits(spec.ContainerEdits(additional_gids=(1,)), spec_level=True),
            "0.6.0",
            id="gids-under-0.6.0",
        ),
    ],
)
def test_a_document_declaring_less_than_its_features_need_is_refused(
    value: spec.Spec, declared: str
) -> None:
    document = spec.to_json(value)
    needed = document["cdiVersion"]
    document["cdiVersion"] = declared
    if declared == needed:
        assert spec.from_json(document) == value
    else:
        with pytest.raises(spec.CDISpecError, match=f"at least v{needed}"):
            spec.from_json(document)


@pytest.mark.parametrize("version", ["0.5", "0.5.1", "2.0.0", ""])
def test_unknown_version_strings_are_refused(version: str) -> None:
    document = spec.to_json(with_edits(PLAIN, spec_level=False))
    document["cdiVersion"] = version
    with pytest.raises(spec.CDISpecError, match="invalid version"):
        spec.from_json(document)


def test_a_leading_v_is_accepted_like_the_cdi_library_does() -> None:
    value = with_edits(PLAIN, spec_level=False)
    document = spec.to_json(value)
    document["cdiVersion"] = "v0.3.0"
    assert spec.from_json(document) == value
