"""``dralet run --driver hostdev --config FILE`` as a process passes strict ``dralet
conformance`` on 1.34 and 1.37 kubelets, kill -9 restarts included, over device nodes
made for the test (``dralet.testing.check_backend`` with ``process=True``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dralet
from dralet import testing
from tests.hostdev.fakehost import FakeHost

pytestmark = pytest.mark.e2e

DRIVER = "hostdev.example.com"


async def test_hostdev_passes_strict_conformance_as_a_process(
    host: FakeHost, tmp_path: Path, short_root: Path
) -> None:
    for index, number in enumerate(((1, 3), (1, 5), (1, 7))):
        host.node(f"acc{index}", number)
    config = tmp_path / "hostdev.yaml"
    config.write_text(
        host.config(
            f"  - name: acc\n    match: {{paths: ['{host.dev}/acc*'], type: char}}\n"
            "    naming: [path]\n    containerPath: /dev/accel\n"
        )
    )
    result = await testing.check_backend_async(
        "hostdev",
        driver_name=DRIVER,
        config=dralet.DriverConfig.read(config),
        process=True,
        root=short_root,
    )
    assert {c.status for c in result.cases} == {"pass"}, result.to_json()
    assert [kubelet for kubelet, _ in result.services] == ["1.34", "1.37"]
    assert result.published == ("acc-acc0", "acc-acc1", "acc-acc2")
