"""Cluster-mode case results and the run's verdict, as JSON and JUnit XML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree

from dralet.conformance.cases import Level
from dralet.conformance.cluster.cases import case
from dralet.conformance.report import Status

__all__ = ["ClusterCaseResult", "ClusterSuiteResult", "Step"]


@dataclass(frozen=True)
class Step:
    """One timed step of a case: what, and how long it took."""

    name: str
    seconds: float


@dataclass(frozen=True)
class ClusterCaseResult:
    name: str
    status: Status
    message: str = ""
    seconds: float = 0.0
    node: str = ""
    steps: tuple[Step, ...] = ()

    @property
    def level(self) -> Level:
        return case(self.name).level

    @property
    def label(self) -> str:
        return f"{self.name}@{self.node}" if self.node else self.name


@dataclass(frozen=True)
class ClusterSuiteResult:
    cases: tuple[ClusterCaseResult, ...]
    driver: str
    server: str
    """The API server's URL and release, e.g. ``https://... (1.37)``."""
    run_id: str
    nodes: tuple[str, ...] = ()
    strict: bool = False
    leftovers: tuple[str, ...] = ()
    """Objects this run created that were still there after its cleanup."""

    def counts(self, c: ClusterCaseResult) -> bool:
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
            "mode": "cluster",
            "driver": self.driver,
            "server": self.server,
            "runId": self.run_id,
            "nodes": list(self.nodes),
            "strict": self.strict,
            "passed": self.passed,
            "leftovers": list(self.leftovers),
            "cases": [
                {
                    "name": c.name,
                    "level": c.level,
                    "node": c.node,
                    "status": c.status,
                    "message": c.message,
                    "seconds": round(c.seconds, 3),
                    "steps": [{"name": s.name, "seconds": round(s.seconds, 3)} for s in c.steps],
                }
                for c in self.cases
            ],
        }

    def to_junit_xml(self) -> str:
        """JUnit XML, one testcase per case and node (classname carries level and node).

        A failed SHOULD case is a ``failure`` only under ``strict``; otherwise it is
        reported in ``system-out``. Objects left after cleanup are a suite ``system-err``.
        """
        failures = [c for c in self.cases if self.counts(c)]
        suite = ElementTree.Element(
            "testsuite",
            name="dralet-conformance-cluster",
            tests=str(len(self.cases)),
            failures=str(len(failures)),
            skipped=str(sum(1 for c in self.cases if c.status == "skip")),
            errors="0",
            time=f"{sum(c.seconds for c in self.cases):.3f}",
        )
        properties = ElementTree.SubElement(suite, "properties")
        pairs = [
            ("driver", self.driver),
            ("server", self.server),
            ("run-id", self.run_id),
            ("nodes", ",".join(self.nodes)),
            ("strict", str(self.strict).lower()),
        ]
        for key, value in pairs:
            ElementTree.SubElement(properties, "property", name=key, value=value)
        for c in self.cases:
            element = ElementTree.SubElement(
                suite,
                "testcase",
                classname=f"dralet.conformance.cluster.{c.level}"
                + (f".{c.node}" if c.node else ""),
                name=c.name,
                time=f"{c.seconds:.3f}",
            )
            timings = "; ".join(f"{s.name} {s.seconds:.2f}s" for s in c.steps)
            if self.counts(c):
                ElementTree.SubElement(element, "failure", message=c.message).text = c.message
            elif c.status == "fail":
                ElementTree.SubElement(element, "system-out").text = f"SHOULD failed: {c.message}"
            elif c.status == "skip":
                ElementTree.SubElement(element, "skipped", message=c.message)
            elif timings:
                ElementTree.SubElement(element, "system-out").text = timings
        if self.leftovers:
            ElementTree.SubElement(suite, "system-err").text = "left after cleanup: " + ", ".join(
                self.leftovers
            )
        root = ElementTree.Element("testsuites")
        root.append(suite)
        ElementTree.indent(root)
        return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
