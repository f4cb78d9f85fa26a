"""Cluster-mode case results and the run's verdict, as JSON and JUnit XML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dralet.conformance.cases import Level
from dralet.conformance.cluster.cases import case
from dralet.conformance.report import Status, counts, failed_names, junit_xml

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
        return counts(c, self.strict)

    @property
    def passed(self) -> bool:
        return not any(self.counts(c) for c in self.cases)

    def failed(self, level: Level | None = None) -> list[str]:
        """Names of the failed cases (each once), optionally of one level."""
        return failed_names(self.cases, level)

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
        """JUnit XML, one testcase per case and node (classname carries level and node);
        a passed case's steps with their times are its ``system-out``, objects left after
        cleanup the suite's ``system-err`` (see ``junit_xml``)."""
        pairs = [
            ("driver", self.driver),
            ("server", self.server),
            ("run-id", self.run_id),
            ("nodes", ",".join(self.nodes)),
            ("strict", str(self.strict).lower()),
        ]
        return junit_xml(
            "dralet-conformance-cluster",
            self.cases,
            strict=self.strict,
            properties=pairs,
            classname=lambda c: (
                f"dralet.conformance.cluster.{c.level}" + (f".{c.node}" if c.node else "")
            ),
            passed_output=lambda c: "; ".join(f"{s.name} {s.seconds:.2f}s" for s in c.steps),
            system_err="left after cleanup: " + ", ".join(self.leftovers) if self.leftovers else "",
        )
