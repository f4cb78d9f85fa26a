"""Random clusters for the scheduler differential (``test_simulate_generated.py``): each
seed gives a scenario of 1-3 nodes, 1-2 drivers, pools with attributes and capacity,
shared counters that partitions consume, tainted devices and DeviceTaintRules, devices
shared by capacity, and pods with 0-3 claims whose requests use CEL selectors, counts
and ``All``, ``firstAvailable``, tolerations, admin access and capacity requests, under
``matchAttribute`` and ``distinctAttribute`` constraints, and containers that request
extended resources backed by DRA (a class's implicit name). Some pools are incomplete (a
slice missing) or invalid (a device name twice), some requests name a DeviceClass that
does not exist, and the sizes are kept small so that requests compete for the same
devices: the search must backtrack across requests, across the claims of a pod and
across nodes, and many pods do not fit.

Every name is prefixed by the scenario's, so that all scenarios live in one cluster
side by side: its nodes, pools, classes and rules are its own, and its pods may go only
to its nodes (node affinity).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

Object = dict[str, Any]

DRIVERS = ("gpu.example.com", "nic.example.com")
MODELS = ("a", "b")
MEMORY = ("1Gi", "2Gi", "4Gi")
TAINT_KEY = "example.com/state"
NAMESPACE = "default"
MISSING_CLASS_ODDS = 0.015
"""How often a request names a DeviceClass that does not exist."""
EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
"""A class's implicit extended resource name, less the class's name."""
EXTENDED_ODDS = 0.15
"""How often a pod with claims also requests an extended resource backed by DRA."""
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label that allows adminAccess requests (the API server refuses them
elsewhere)."""


@dataclass
class Scenario:
    """One random cluster: what to create, and the pods in the order they are created."""

    name: str
    nodes: list[str]
    classes: list[Object] = field(default_factory=list)
    slices: list[Object] = field(default_factory=list)
    rules: list[Object] = field(default_factory=list)
    claims: list[Object] = field(default_factory=list)
    pods: list[Object] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    """What the scenario exercises (for the coverage line)."""

    def objects(self) -> list[Object]:
        """Everything but the pods, in creation order."""
        return [*self.classes, *self.slices, *self.rules, *self.claims]


def _class(name: str, driver: str) -> Object:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
    }


def _slice(name: str, driver: str, pool: str, node: str, count: int, **spec: Any) -> Object:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
            "nodeName": node,
            **spec,
        },
    }


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.name = f"gen{seed}"
        nodes = [f"{self.name}-n{i}" for i in range(self.rng.randint(1, 3))]
        self.scenario = Scenario(name=self.name, nodes=nodes)
        self.drivers = list(DRIVERS[: self.rng.randint(1, 2)])
        self.devices: list[tuple[str, str, Object]] = []
        """(driver, pool, device) of every device published."""

    @property
    def features(self) -> set[str]:
        return self.scenario.features

    def build(self) -> Scenario:
        for driver in self.drivers:
            self.scenario.classes.append(_class(f"{self.name}-{driver}", driver))
        for node in self.scenario.nodes:
            for driver in self.drivers:
                self._pool(node, driver)
        self._rules()
        for p in range(self.rng.randint(2, 5)):
            self._pod(p)
        return self.scenario

    # --- devices ------------------------------------------------------------------

    def _device(self, name: str, driver: str) -> Object:
        rng = self.rng
        device: Object = {
            "name": name,
            "attributes": {
                "model": {"string": rng.choice(MODELS)},
                "numa": {"int": rng.randint(0, 1)},
            },
            "capacity": {"memory": {"value": rng.choice(MEMORY)}},
        }
        if rng.random() < 0.2:
            # No NoExecute: the eviction controller would delete pods during the run.
            effect = rng.choice(("NoSchedule", "None"))
            device["taints"] = [{"key": TAINT_KEY, "value": rng.choice("ab"), "effect": effect}]
            self.features.add("device-taints")
        return device

    def _pool(self, node: str, driver: str) -> None:
        rng = self.rng
        short = driver.split(".")[0]
        pool = f"{node}-{short}"
        devices = [self._device(f"{short}-{j}", driver) for j in range(rng.randint(2, 4))]
        spec: Object = {"devices": devices}
        slices = [_slice(f"{pool}-0", driver, pool, node, 1, **spec)]
        kind = rng.choices(
            ("plain", "partitions", "shared", "incomplete", "invalid"), (6, 2, 2, 1, 1)
        )[0]
        if kind == "partitions":
            gpu = {"name": f"{short}-whole", "capacity": {"memory": {"value": "8Gi"}}}
            halves = [
                {"name": f"{short}-half-{h}", "capacity": {"memory": {"value": "4Gi"}}}
                for h in "ab"
            ]
            for part, amount in ((gpu, "8Gi"), (halves[0], "4Gi"), (halves[1], "4Gi")):
                part["attributes"] = {"model": {"string": "part"}, "numa": {"int": 0}}
                part["consumesCounters"] = [
                    {"counterSet": "whole", "counters": {"memory": {"value": amount}}}
                ]
            devices.extend([gpu, *halves])
            counters = _slice(
                f"{pool}-counters",
                driver,
                pool,
                node,
                2,
                sharedCounters=[{"name": "whole", "counters": {"memory": {"value": "8Gi"}}}],
            )
            slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
            slices.append(counters)
            self.features.add("partitions")
        elif kind == "shared":
            shared: Object = {
                "name": f"{short}-shared",
                "attributes": {"model": {"string": "shared"}, "numa": {"int": 1}},
                "allowMultipleAllocations": True,
                "capacity": {"memory": {"value": "4Gi"}},
            }
            if rng.random() < 0.5:
                shared["capacity"]["memory"]["requestPolicy"] = {
                    "default": "1Gi",
                    "validRange": {"min": "1Gi", "step": "1Gi"},
                }
            devices.append(shared)
            self.features.add("shared-capacity")
        elif kind == "incomplete":
            slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
            self.features.add("incomplete-pool")
        elif kind == "invalid":
            twin = _slice(f"{pool}-1", driver, pool, node, 2, devices=[dict(devices[0])])
            slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
            slices.append(twin)
            self.features.add("invalid-pool")
        self.scenario.slices.extend(slices)
        if kind != "invalid":
            self.devices.extend((driver, pool, d) for d in devices)

    def _rules(self) -> None:
        if not self.devices or self.rng.random() < 0.6:
            return
        driver, pool, device = self.rng.choice(self.devices)
        self.scenario.rules.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"{self.name}-rule"},
                "spec": {
                    "deviceSelector": {"driver": driver, "pool": pool, "device": device["name"]},
                    "taint": {"key": TAINT_KEY, "value": "rule", "effect": "NoSchedule"},
                },
            }
        )
        self.features.add("taint-rules")

    # --- claims -------------------------------------------------------------------

    def _class_name(self) -> str:
        if self.rng.random() < MISSING_CLASS_ODDS:
            self.features.add("missing-class")
            return f"{self.name}-missing"
        return f"{self.name}-{self.rng.choice(self.drivers)}"

    def _selectors(self, driver_class: str) -> list[Object]:
        rng = self.rng
        driver = driver_class.removeprefix(f"{self.name}-")
        if driver not in DRIVERS:
            return []
        choice = rng.choice(("none", "none", "model", "memory", "kind"))
        if choice == "model":
            expression = f'device.attributes["{driver}"].model == "{rng.choice(MODELS)}"'
        elif choice == "memory":
            amount = rng.choice(MEMORY)
            expression = f'device.capacity["{driver}"].memory.compareTo(quantity("{amount}")) >= 0'
        elif choice == "kind":
            expression = (
                f'device.attributes["{driver}"].model == "{rng.choice(("part", "shared"))}"'
            )
        else:
            return []
        self.features.add("cel-selectors")
        return [{"cel": {"expression": expression}}]

    def _exactly(self, *, entry: bool = False) -> Object:
        """A request's fields; ``entry``: of a firstAvailable entry (no adminAccess)."""
        rng = self.rng
        class_name = self._class_name()
        exactly: Object = {"deviceClassName": class_name}
        if selectors := self._selectors(class_name):
            exactly["selectors"] = selectors
        mode = rng.choices(("one", "two", "all"), (12, 4, 1))[0]
        if mode == "two":
            exactly["count"] = 2
        elif mode == "all":
            exactly["allocationMode"] = "All"
            self.features.add("all-mode")
        if rng.random() < 0.25:
            exactly["tolerations"] = [
                rng.choice(
                    (
                        {"key": TAINT_KEY, "operator": "Exists"},
                        {"key": TAINT_KEY, "operator": "Equal", "value": "a"},
                        {"operator": "Exists", "effect": "NoSchedule"},
                        {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
                    )
                )
            ]
            self.features.add("tolerations")
        if rng.random() < 0.2:
            exactly["capacity"] = {"requests": {"memory": rng.choice(("1Gi", "2Gi", "3Gi"))}}
            self.features.add("capacity-requests")
        if rng.random() < 0.05 and mode != "all" and not entry:
            exactly["adminAccess"] = True
            self.features.add("admin-access")
        return exactly

    def _claim(self, name: str) -> Object:
        rng = self.rng
        requests: list[Object] = []
        for r in range(rng.choice((1, 1, 2))):
            if rng.random() < 0.2:
                subs = [{"name": f"s{s}", **self._exactly(entry=True)} for s in range(2)]
                requests.append({"name": f"r{r}", "firstAvailable": subs})
                self.features.add("first-available")
            else:
                requests.append({"name": f"r{r}", "exactly": self._exactly()})
        spec: Object = {"requests": requests}
        if rng.random() < 0.3:
            names = [r["name"] for r in requests]
            kind = rng.choice(("matchAttribute", "matchAttribute", "distinctAttribute"))
            attribute = rng.choice(("model", "numa"))
            driver = rng.choice(self.drivers)
            spec["constraints"] = [{"requests": names, kind: f"{driver}/{attribute}"}]
            self.features.add(kind)
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"devices": spec},
        }

    def _extended(self) -> Object:
        """Container requests of an extended resource backed by one of the classes."""
        driver = self.rng.choice(self.drivers)
        resource = f"{EXTENDED_PREFIX}{self.name}-{driver}"
        self.features.add("extended-resources")
        return {resource: str(self.rng.randint(1, 2))}

    def _pod(self, p: int) -> None:
        claims = [f"{self.name}-p{p}-c{c}" for c in range(self.rng.choice((0, 1, 1, 1, 2, 3)))]
        extended = self._extended() if not claims or self.rng.random() < EXTENDED_ODDS else {}
        resources: Object = {"claims": [{"name": f"c{i}"} for i in range(len(claims))]}
        if extended:
            resources["requests"] = extended
            resources["limits"] = extended
        if len(claims) > 1:
            self.features.add("claims-per-pod")
        self.scenario.claims.extend(self._claim(c) for c in claims)
        term = {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": self.scenario.nodes}
            ]
        }
        self.scenario.pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{self.name}-p{p}", "namespace": NAMESPACE},
                "spec": {
                    "automountServiceAccountToken": False,
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [term]
                            }
                        }
                    },
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": resources,
                        }
                    ],
                    "resourceClaims": [
                        {"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)
                    ],
                },
            }
        )


def scenario(seed: int) -> Scenario:
    """The random cluster of ``seed`` (the same on every run)."""
    return _Builder(seed).build()
