"""The example driver: N simulated GPUs, for demos, tests and as a template.

It uses only the public ``dralet`` API, like a third-party driver would.
"""

from dralet.drivers.example.gpus import DRIVER_NAME, SimulatedGPUs

__all__ = ["DRIVER_NAME", "SimulatedGPUs"]
