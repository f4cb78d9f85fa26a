"""``import dralet`` is the author's whole API: every public name loads lazily and says
what it is, and ``help(dralet.run)`` states the author contract."""

from __future__ import annotations

import dataclasses
import inspect
import pydoc
import subprocess
import sys

import dralet

UNDOCUMENTED: tuple[str, ...] = ()
"""Public names whose definitions still lack a docstring (the list only shrinks)."""


def _own_doc(value: object) -> str:
    doc = inspect.getdoc(value) or ""
    name = getattr(value, "__name__", "")
    if dataclasses.is_dataclass(value) and doc.startswith(f"{name}("):
        return ""  # the signature dataclasses write when the class has no docstring
    if isinstance(value, type) and value.__doc__ is None:
        return ""
    return doc


def test_every_public_class_and_function_has_a_docstring() -> None:
    missing = []
    for name in dralet.__all__:
        value = getattr(dralet, name)
        if not (inspect.isclass(value) or inspect.isfunction(value)):
            continue  # type aliases (ClaimUID, TaintEffect) are documented in their source
        if not _own_doc(value):
            missing.append(name)
    assert sorted(missing) == sorted(UNDOCUMENTED)


def test_help_of_run_states_the_author_contract() -> None:
    text = pydoc.render_doc(dralet.run, renderer=pydoc.plaintext)
    for needle in (
        "devices() -> Sequence[Device]",
        "prepare_claim(allocation) -> Sequence[PreparedDevice]",
        "release_claim(allocation, states)",
        "DeviceClass configs before claim configs",
        "backend_call_timeout",
        "plain ``def``",
        "PartialPrepareError",
        "devices_in_use()",
        "survives_reboot(device, state)",
        "health()",
        "TemporaryError",
        '[project.entry-points."dralet.drivers"]',
        "def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> ClaimBackend",
        "--driver-config",
        "Driver.publish()",
        "SIGTERM",
    ):
        assert needle in text, needle


def test_the_public_names_load_lazily() -> None:
    code = (
        "import sys, dralet; "
        "assert 'dralet.node.driver' not in sys.modules; "
        "dralet.Settings; dralet.run; "
        "assert 'dralet.node.driver' in sys.modules; "
        "print(sorted(set(dralet.__all__) - set(dir(dralet))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
