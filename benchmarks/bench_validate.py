"""Cold start of the ``dralet`` command (a script, not a test): ``dralet --help``,
``dralet validate`` of one small file and of a directory of 100 files, each run as a
fresh process as a pre-commit hook runs it. Prints the median wall time of several runs
and the marginal cost of one more file. Goal: one small file in 0.3 s or less. The CPU
column (user + system time of the child) is what the command itself costs; on a busy
machine the wall time also holds the wait for a CPU.

Run: .venv/bin/python benchmarks/bench_validate.py [--runs N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DRALET = Path(sys.executable).parent / "dralet"
GOAL_SMALL_FILE_SECONDS = 0.3
DIRECTORY_FILES = 100
MILLISECONDS = 1000

SMALL = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.example.com
spec:
  selectors:
  - cel:
      expression: device.driver == "gpu.example.com"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gpu-{index}
  namespace: ml
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.example.com
          selectors:
          - cel:
              expression: device.attributes["gpu.example.com"].index == {index}
"""


def wall(args: list[str], runs: int) -> tuple[float, float]:
    """Median wall and CPU time of ``runs`` fresh processes."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(args, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        small = root / "small.yaml"
        small.write_text(SMALL.replace("{index}", "0"), encoding="utf-8")
        many = root / "many"
        many.mkdir()
        for index in range(DIRECTORY_FILES):
            text = SMALL.replace("{index}", str(index)).replace(
                "name: gpu.example.com", f"name: gpu-{index}.example.com"
            )
            (many / f"claim-{index:03d}.yaml").write_text(text, encoding="utf-8")
        python = wall([sys.executable, "-c", "pass"], args.runs)
        help_ = wall([str(DRALET), "--help"], args.runs)
        one = wall([str(DRALET), "validate", str(small)], args.runs)
        hundred = wall([str(DRALET), "validate", str(many)], args.runs)
    marginal = (hundred[0] - one[0]) / (DIRECTORY_FILES - 1)
    marginal_cpu = (hundred[1] - one[1]) / (DIRECTORY_FILES - 1)
    ms = MILLISECONDS
    print(f"median of {args.runs} cold runs")
    print(f"{'command':<40} {'wall ms':>9} {'CPU ms':>9}")
    for label, (wall_s, cpu_s) in (
        ("python -c pass (interpreter start)", python),
        ("dralet --help", help_),
        ("dralet validate small.yaml", one),
        (f"dralet validate dir/ ({DIRECTORY_FILES} files)", hundred),
    ):
        print(f"{label:<40} {wall_s * ms:>9.0f} {cpu_s * ms:>9.0f}")
    print(f"marginal cost per file: {marginal * ms:.1f} ms wall, {marginal_cpu * ms:.1f} ms CPU")
    met = "met" if one[0] <= GOAL_SMALL_FILE_SECONDS else "NOT met"
    met_cpu = "met" if one[1] <= GOAL_SMALL_FILE_SECONDS else "NOT met"
    goal = GOAL_SMALL_FILE_SECONDS * ms
    print(f"goal one small file <= {goal:.0f} ms: wall {met}, CPU {met_cpu}")


if __name__ == "__main__":
    main()
