"""Case results and the suite's verdict, as JSON and JUnit XML."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from xml.etree import ElementTree

from dralet.conformance.cases import Level, case

__all__ = ["CaseResult", "Judged", "Status", "SuiteResult", "counts", "failed_names", "junit_xml"]

Status = Literal["pass", "fail", "skip"]


class Judged(Protocol):
    """A case result of either mode, as the verdict and the JUnit report read it."""

    @property
    def name(self) -> str: ...
    @property
    def status(self) -> Status: ...
    @property
    def message(self) -> str: ...
    @property
    def seconds(self) -> float: ...
    @property
    def level(self) -> Level: ...


def counts(c: Judged, strict: bool) -> bool:
    """Whether ``c`` fails the run: a failed MUST case, or any failed case under ``strict``."""
    return c.status == "fail" and (strict or c.level == "MUST")


def failed_names(cases: Sequence[Judged], level: Level | None = None) -> list[str]:
    """Names of the failed cases (each once), optionally of one level."""
    names: list[str] = []
    for c in cases:
        if c.status == "fail" and (level is None or c.level == level) and c.name not in names:
            names.append(c.name)
    return names


def junit_xml(
    suite_name: str,
    cases: Sequence[Judged],
    *,
    strict: bool,
    properties: Sequence[tuple[str, str]],
    classname: Callable[[Any], str],
    passed_output: Callable[[Any], str] = lambda c: "",
    system_err: str = "",
) -> str:
    """JUnit XML, one testsuite with a testcase per case, for CI systems.

    A failed SHOULD case is a ``failure`` only under ``strict``; otherwise it is reported
    in ``system-out`` so CI shows it without failing the build. ``passed_output`` is the
    ``system-out`` of a case that passed (its timings, say); ``system_err`` the suite's."""
    suite = ElementTree.Element(
        "testsuite",
        name=suite_name,
        tests=str(len(cases)),
        failures=str(sum(1 for c in cases if counts(c, strict))),
        skipped=str(sum(1 for c in cases if c.status == "skip")),
        errors="0",
        time=f"{sum(c.seconds for c in cases):.3f}",
    )
    element = ElementTree.SubElement(suite, "properties")
    for key, value in properties:
        ElementTree.SubElement(element, "property", name=key, value=value)
    for c in cases:
        element = ElementTree.SubElement(
            suite, "testcase", classname=classname(c), name=c.name, time=f"{c.seconds:.3f}"
        )
        if counts(c, strict):
            ElementTree.SubElement(element, "failure", message=c.message).text = c.message
        elif c.status == "fail":
            ElementTree.SubElement(element, "system-out").text = f"SHOULD failed: {c.message}"
        elif c.status == "skip":
            ElementTree.SubElement(element, "skipped", message=c.message)
        elif out := passed_output(c):
            ElementTree.SubElement(element, "system-out").text = out
    if system_err:
        ElementTree.SubElement(suite, "system-err").text = system_err
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


@dataclass(frozen=True)
class CaseResult:
    name: str
    status: Status
    message: str = ""
    seconds: float = 0.0
    kubelet: str = ""
    """The kubelet version of a per-kubelet case ('' for the registration cases)."""

    @property
    def level(self) -> Level:
        return case(self.name).level

    @property
    def label(self) -> str:
        return f"{self.name}@{self.kubelet}" if self.kubelet else self.name


@dataclass(frozen=True)
class SuiteResult:
    cases: tuple[CaseResult, ...]
    driver: str = ""
    endpoint: str = ""
    services: tuple[tuple[str, str], ...] = ()
    """(kubelet version, DRA service it used) for each kubelet the cases ran for."""
    strict: bool = False
    """Whether SHOULD failures fail the suite too."""
    devices: tuple[str, ...] = ()
    """The devices the cases allocated."""
    published: tuple[str, ...] = ()
    """The devices of the driver's first ResourceSlice with devices for the node (empty
    when the devices to allocate were given)."""

    def counts(self, c: CaseResult) -> bool:
        return counts(c, self.strict)

    @property
    def passed(self) -> bool:
        return not any(self.counts(c) for c in self.cases)

    def failed(self, level: Level | None = None) -> list[str]:
        """Names of the failed cases (each once), optionally of one level."""
        return failed_names(self.cases, level)

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "endpoint": self.endpoint,
            "services": {kubelet: service for kubelet, service in self.services},
            "strict": self.strict,
            "passed": self.passed,
            "cases": [
                {
                    "name": c.name,
                    "level": c.level,
                    "kubelet": c.kubelet,
                    "status": c.status,
                    "message": c.message,
                    "seconds": round(c.seconds, 3),
                }
                for c in self.cases
            ],
        }

    def to_junit_xml(self) -> str:
        """JUnit XML, one testcase per case and kubelet (see ``junit_xml``)."""
        pairs = [
            ("driver", self.driver),
            ("endpoint", self.endpoint),
            ("strict", str(self.strict).lower()),
        ]
        pairs += [(f"service.kubelet-{k}", s) for k, s in self.services]
        return junit_xml(
            "dralet-conformance",
            self.cases,
            strict=self.strict,
            properties=pairs,
            classname=lambda c: (
                f"dralet.conformance.{c.level}" + (f".kubelet-{c.kubelet}" if c.kubelet else "")
            ),
        )
