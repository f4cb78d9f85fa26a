"""Case results and the suite's verdict, as JSON and JUnit XML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from xml.etree import ElementTree

from dralet.conformance.cases import Level, case

__all__ = ["CaseResult", "Status", "SuiteResult"]

Status = Literal["pass", "fail", "skip"]


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
        return c.status == "fail" and (self.strict or c.level == "MUST")

    @property
    def passed(self) -> bool:
        return not any(self.counts(c) for c in self.cases)

    def failed(self, level: Level | None = None) -> list[str]:
        """Names of the failed cases (each once), optionally of one level."""
        names: list[str] = []
        for c in self.cases:
            if c.status == "fail" and (level is None or c.level == level) and c.name not in names:
                names.append(c.name)
        return names

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
        """JUnit XML (one testsuite, one testcase per case and kubelet) for CI systems.

        A failed SHOULD case is a ``failure`` only under ``strict``; otherwise it is
        reported in ``system-out`` so CI shows it without failing the build.
        """
        failures = [c for c in self.cases if self.counts(c)]
        suite = ElementTree.Element(
            "testsuite",
            name="dralet-conformance",
            tests=str(len(self.cases)),
            failures=str(len(failures)),
            skipped=str(sum(1 for c in self.cases if c.status == "skip")),
            errors="0",
            time=f"{sum(c.seconds for c in self.cases):.3f}",
        )
        properties = ElementTree.SubElement(suite, "properties")
        pairs = [
            ("driver", self.driver),
            ("endpoint", self.endpoint),
            ("strict", str(self.strict).lower()),
        ]
        pairs += [(f"service.kubelet-{k}", s) for k, s in self.services]
        for key, value in pairs:
            ElementTree.SubElement(properties, "property", name=key, value=value)
        for c in self.cases:
            element = ElementTree.SubElement(
                suite,
                "testcase",
                classname=f"dralet.conformance.{c.level}"
                + (f".kubelet-{c.kubelet}" if c.kubelet else ""),
                name=c.name,
                time=f"{c.seconds:.3f}",
            )
            if self.counts(c):
                ElementTree.SubElement(element, "failure", message=c.message).text = c.message
            elif c.status == "fail":
                ElementTree.SubElement(element, "system-out").text = f"SHOULD failed: {c.message}"
            elif c.status == "skip":
                ElementTree.SubElement(element, "skipped", message=c.message)
        root = ElementTree.Element("testsuites")
        root.append(suite)
        ElementTree.indent(root)
        return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
