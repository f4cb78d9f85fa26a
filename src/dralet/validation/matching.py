"""Lint rules that evaluate selectors against the devices of the ResourceSlices given in
the same run: a class or request that no device matches (DRA105), and a selector that
fails at run time on a published device (DRA107), which aborts scheduling.

Selectors are evaluated as the scheduler does: the class's selectors in order, then the
request's, stopping at the first false one. Devices are turned into CEL views once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dralet.validation import expressions
from dralet.validation.diagnostics import Anchor, Finding, Path
from dralet.validation.slices import PublishedDevice

if TYPE_CHECKING:
    from dralet.allocation import cel

__all__ = ["DeviceCatalog", "Selection", "selection_findings"]


@dataclass(frozen=True)
class Selection:
    """Selector expressions to evaluate together, each with the path of its expression."""

    label: str
    """How the message names it: ``request 'gpu' (class 'gpu.example.com')``."""
    selectors: tuple[tuple[str, Path | None], ...]
    """(expression, path or None when it belongs to another object)."""
    path: Path
    anchor: Anchor


class DeviceCatalog:
    """The given slices' devices, each converted to a CEL device view once."""

    def __init__(self, devices: Sequence[PublishedDevice]) -> None:
        self.devices: list[PublishedDevice] = []
        self._views: list[cel.DeviceView] = []
        device_view = expressions.cel_module().device_view
        for device in devices:
            view = device_view(
                driver=device.driver, attributes=device.attributes, capacity=device.capacity
            )
            if view.conversion_error is None:  # an invalid value is reported as DRA014
                self.devices.append(device)
                self._views.append(view)

    def __len__(self) -> int:
        return len(self.devices)

    def items(self) -> Iterator[tuple[PublishedDevice, cel.DeviceView]]:
        return zip(self.devices, self._views, strict=True)


def _compiled(selection: Selection) -> list[cel.CompiledSelector] | None:
    try:
        # Lenient about includes(): a target without list attributes has already
        # reported it as DRA020 where the expression is.
        engine = expressions.engine(list_type_attributes=True)
        return [engine.compile(e) for e, _ in selection.selectors]
    except expressions.cel_module().CelCompileError:
        return None  # reported as DRA020 where the expression is


def selection_findings(selection: Selection, catalog: DeviceCatalog) -> Iterator[Finding]:
    compiled = _compiled(selection)
    if compiled is None or not compiled or not len(catalog):
        return
    runtime_error: type[Exception] = expressions.cel_module().CelRuntimeError
    matched = 0
    failed: dict[int, tuple[PublishedDevice, str]] = {}
    for device, view in catalog.items():
        selected = True
        for index, selector in enumerate(compiled):
            try:
                if not selector.matches(view):
                    selected = False
                    break
            except runtime_error as error:
                failed.setdefault(index, (device, str(error)))
                selected = False
                break
        matched += selected
    for index, (device, reason) in sorted(failed.items()):
        where = selection.selectors[index][1]
        if where is None:
            continue
        yield Finding(
            "DRA107",
            where,
            f"CEL runtime error on device {device.driver}/{device.pool}/{device.name}: {reason}; "
            "the scheduler aborts the pod instead of skipping the device",
            Anchor.TEXT,
        )
    if not matched:
        yield Finding(
            "DRA105",
            selection.path,
            f"no device in the given slices matches {selection.label} "
            f"({len(catalog)} device{'' if len(catalog) == 1 else 's'} checked)",
            selection.anchor,
        )
