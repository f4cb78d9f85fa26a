"""``to_json`` and ``from_json`` agree on every valid spec.

The claim engine validates the ``Spec`` value it builds and writes ``to_json``'s document
without parsing it back; this property is what makes that safe: whatever ``to_json``
emits, the strict parser (the CDI library's rules) reads back as the same spec.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dralet.cdi import spec as cdi_spec

_NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,20}[A-Za-z0-9])?", fullmatch=True)
_TEXT = st.text(min_size=1, max_size=12)
_OPTIONAL_TEXT = st.one_of(st.just(""), _TEXT)
_UINT32 = st.integers(min_value=0, max_value=cdi_spec.UINT32_MAX)
_ENV = st.tuples(st.from_regex(r"[A-Z_]{1,8}", fullmatch=True), st.text(max_size=8)).map("=".join)
_ANNOTATIONS = st.dictionaries(
    st.from_regex(r"[a-z]{1,8}\.example\.com/[a-z]{1,8}", fullmatch=True), st.text(max_size=8)
)

_NODES = st.builds(
    cdi_spec.DeviceNode,
    path=_TEXT,
    host_path=_OPTIONAL_TEXT,
    type=st.sampled_from(["", "b", "c", "u", "p"]),
    major=st.none() | st.integers(min_value=0, max_value=4095),
    minor=st.none() | st.integers(min_value=0, max_value=1 << 20),
    file_mode=st.none() | st.integers(min_value=0, max_value=0o7777),
    permissions=st.sampled_from(["", "r", "rw", "rwm", "m"]),
    uid=st.none() | _UINT32,
    gid=st.none() | _UINT32,
)
_MOUNTS = st.builds(
    cdi_spec.Mount,
    host_path=_TEXT,
    container_path=_TEXT,
    options=st.lists(_TEXT, max_size=3).map(tuple),
    type=_OPTIONAL_TEXT,
)
_HOOKS = st.builds(
    cdi_spec.Hook,
    hook_name=st.sampled_from(sorted(cdi_spec.HOOK_NAMES)),
    path=_TEXT,
    args=st.lists(_TEXT, max_size=3).map(tuple),
    env=st.lists(_ENV, max_size=2).map(tuple),
    timeout=st.none() | st.integers(min_value=0, max_value=600),
)
_EDITS = st.builds(
    cdi_spec.ContainerEdits,
    env=st.lists(_ENV, max_size=3).map(tuple),
    device_nodes=st.lists(_NODES, max_size=2).map(tuple),
    mounts=st.lists(_MOUNTS, max_size=2).map(tuple),
    hooks=st.lists(_HOOKS, max_size=2).map(tuple),
    additional_gids=st.lists(_UINT32, max_size=2).map(tuple),
)
_DEVICES = st.builds(
    cdi_spec.CDIDevice,
    name=_NAME,
    container_edits=_EDITS.filter(lambda edits: not edits.is_empty()),
    annotations=_ANNOTATIONS,
)
_SPECS = st.builds(
    cdi_spec.Spec,
    kind=st.sampled_from(["gpu.example.com/claim", "example.com/gpu", "acme.io/fpga.v2"]),
    devices=st.lists(_DEVICES, min_size=1, max_size=3, unique_by=lambda d: d.name).map(tuple),
    container_edits=_EDITS,
    annotations=_ANNOTATIONS,
)


@settings(max_examples=150, deadline=None)
@given(_SPECS)
def test_every_valid_spec_reads_back_as_itself(value: cdi_spec.Spec) -> None:
    document = cdi_spec.to_json(value)
    assert cdi_spec.from_json(document) == value
    # And as a runtime reads it: from the file's JSON text.
    assert cdi_spec.from_json(json.loads(json.dumps(document))) == value
