"""dralet's CDI name validator and a real runtime's CDI library agree on every name.

Each case is a qualified device id ``vendor/class=name``. dralet's verdict comes from
``dralet.cdi.names.parse_qualified_name``; podman's from a real run: a spec file
declaring that kind and device name, and ``podman run --device <id>``. Podman accepts
when the container gets the spec's edit, and rejects when it refuses to start the
container. Where the two differ, the case says why, and the test asserts exactly that
difference: podman's CDI library (v0.5.x) crashes on one-character vendor and class
names, predates dotted classes (spec 0.6.0), and has none of the spec's length limits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.harness import podman

from dralet.cdi import names

pytestmark = pytest.mark.runtime

ACCEPT = "accept"
REJECT = "reject"
PANIC = "panic"  # podman exits 2 with a Go panic
GO_PANIC_EXIT = 2
SPEC_VERSION = "0.5.0"  # the newest podman 4.3 loads; the names alone decide
MARKER = "CDI_NAME_CASE=resolved"


@dataclass(frozen=True)
class NameCase:
    id: str
    device: str
    dralet: str
    podman: str
    why: str = ""
    """Why podman's verdict differs from dralet's; empty when they agree."""


CASES = [
    NameCase("plain", "example.com/gpu=dev0", ACCEPT, ACCEPT),
    NameCase("upper-case", "Example.COM/GPU=Dev0", ACCEPT, ACCEPT),
    NameCase("punctuation", "my-vendor_x.example.com/gpu-class_1=dev0", ACCEPT, ACCEPT),
    NameCase("vendor-without-dot", "example/gpu=dev0", ACCEPT, ACCEPT),
    NameCase("name-with-_.:-", "example.com/gpu=claim-uid_1.2:3", ACCEPT, ACCEPT),
    NameCase(
        "name-is-uuid", "example.com/gpu=0b9f1c2e-5d4a-4c3b-9e8f-7a6b5c4d3e2f", ACCEPT, ACCEPT
    ),
    NameCase("name-digit-start", "example.com/gpu=0gpu", ACCEPT, ACCEPT),
    NameCase("name-one-digit", "example.com/gpu=0", ACCEPT, ACCEPT),
    NameCase("name-one-letter", "example.com/gpu=d", ACCEPT, ACCEPT),
    NameCase("two-char-vendor-and-class", "ex/gp=dev0", ACCEPT, ACCEPT),
    NameCase("class-63-chars", f"example.com/c{'l' * 61}s=dev0", ACCEPT, ACCEPT),
    NameCase("vendor-253-chars", f"v{'e' * 251}n/gpu=dev0", ACCEPT, ACCEPT),
    NameCase("name-300-chars", f"example.com/gpu=d{'e' * 298}v", ACCEPT, ACCEPT),
    NameCase("name-leading-dash", "example.com/gpu=-dev0", REJECT, REJECT),
    NameCase("name-trailing-dash", "example.com/gpu=dev0-", REJECT, REJECT),
    NameCase("name-trailing-underscore", "example.com/gpu=dev0_", REJECT, REJECT),
    NameCase("name-trailing-colon", "example.com/gpu=dev0:", REJECT, REJECT),
    NameCase("class-trailing-dash", "example.com/gpu-=dev0", REJECT, REJECT),
    NameCase("vendor-trailing-dash", "example.com-/gpu=dev0", REJECT, REJECT),
    NameCase("vendor-leading-dash", "-example.com/gpu=dev0", REJECT, REJECT),
    NameCase("vendor-digit-start", "1example.com/gpu=dev0", REJECT, REJECT),
    NameCase("class-digit-start", "example.com/1gpu=dev0", REJECT, REJECT),
    NameCase("slash-in-name", "example.com/gpu=dev/0", REJECT, REJECT),
    NameCase("slash-in-class", "example.com/gpu/extra=dev0", REJECT, REJECT),
    NameCase("colon-in-class", "example.com/g:pu=dev0", REJECT, REJECT),
    NameCase("equals-in-name", "example.com/gpu=dev0=x", REJECT, REJECT),
    NameCase("space-in-name", "example.com/gpu=dev 0", REJECT, REJECT),
    NameCase("unicode-class", "example.com/gpü=dev0", REJECT, REJECT),
    NameCase("unicode-name", "example.com/gpu=dév0", REJECT, REJECT),
    NameCase("empty-name", "example.com/gpu=", REJECT, REJECT),
    NameCase("empty-class", "example.com/=dev0", REJECT, REJECT),
    NameCase("empty-vendor", "/gpu=dev0", REJECT, REJECT),
    NameCase("no-equals", "example.com/gpu", REJECT, REJECT),
    NameCase("no-slash", "example.com=dev0", REJECT, REJECT),
    NameCase(
        "one-char-vendor",
        "x/gpu=dev0",
        REJECT,
        PANIC,
        why="CDI libraries up to v1.1.0 slice name[1:len-1] and panic on 1-char names",
    ),
    NameCase(
        "one-char-class",
        "example.com/x=dev0",
        REJECT,
        PANIC,
        why="same slice-bounds panic, in the class check",
    ),
    NameCase(
        "dotted-class",
        "example.com/g.pu=dev0",
        ACCEPT,
        REJECT,
        why="dots in a class are valid from spec 0.6.0; podman 4.3's library is v0.5.x",
    ),
    NameCase(
        "class-64-chars",
        f"example.com/c{'l' * 62}s=dev0",
        REJECT,
        ACCEPT,
        why="the spec limits the kind name segment to 63; the library checks no length",
    ),
    NameCase(
        "vendor-254-chars",
        f"v{'e' * 252}n/gpu=dev0",
        REJECT,
        ACCEPT,
        why="the spec limits the vendor to 253 (a DNS subdomain); no length check in code",
    ),
]


def dralet_verdict(device: str) -> str:
    try:
        names.parse_qualified_name(device)
    except names.CDINameError:
        return REJECT
    return ACCEPT


def podman_verdict(run: podman.ContainerRun) -> str:
    if run.ok and run.env.get(MARKER.partition("=")[0]) == MARKER.partition("=")[2]:
        return ACCEPT
    if run.panicked and run.exit_code == GO_PANIC_EXIT:
        return PANIC
    assert run.podman_failed, f"container ran but did not get the edit: {run}"
    return REJECT


def test_cases_cover_agreement_and_every_known_podman_fault() -> None:
    assert len({case.id for case in CASES}) == len(CASES)
    assert all(bool(case.why) == (case.dralet != case.podman) for case in CASES)
    assert {c.id for c in CASES if c.podman == PANIC} == {"one-char-vendor", "one-char-class"}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_dralet_and_podman_give_the_same_verdict(
    case: NameCase, cdi_dir: Path, podman_settings: podman.PodmanSettings
) -> None:
    assert dralet_verdict(case.device) == case.dralet
    kind, sep, name = case.device.partition("=")
    if sep:
        document = {
            "cdiVersion": SPEC_VERSION,
            "kind": kind,
            "devices": [{"name": name, "containerEdits": {"env": [MARKER]}}],
        }
        (cdi_dir / "name-case.json").write_text(json.dumps(document))

    run = podman.run_container(cdi_dir, [case.device], settings=podman_settings)

    assert podman_verdict(run) == case.podman, (run.exit_code, run.stderr, run.cdi_error)
    if not case.why:
        assert case.dralet == case.podman
