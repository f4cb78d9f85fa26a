"""The Acme FPGA backend and the factory ``dralet run --driver acme-fpga`` calls.

The "hardware" is a record of which claim each FPGA is programmed for, kept in the
state dir dralet gives the driver (``fpgas.json``), so that a restarted driver and
``devices_in_use`` see what the cards see. A claim may ask for a bitstream in its
opaque device configuration (``{"bitstream": "crc32.bit"}``); otherwise the driver's
default from ``--driver-config`` is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dralet

__all__ = ["DRIVER_NAME", "AcmeFPGAs", "factory"]

DRIVER_NAME = "fpga.acme.example.com"
DEFAULT_BITSTREAM = "passthrough.bit"


class AcmeFPGAs:
    """``count`` FPGAs named ``fpga-0`` … ``fpga-<count-1>`` (a ``dralet.DeviceBackend``)."""

    def __init__(self, *, state_dir: Path, count: int, bitstream: str = DEFAULT_BITSTREAM) -> None:
        self.count = count
        self.bitstream = bitstream
        self._record = state_dir / "fpgas.json"
        self._lock = dralet.FileLock(state_dir / "fpgas.lock")

    def _programmed(self) -> dict[str, dict[str, str]]:
        try:
            data: dict[str, dict[str, str]] = json.loads(self._record.read_text())
            return data
        except FileNotFoundError:
            return {}

    def _save(self, programmed: Mapping[str, Mapping[str, str]]) -> None:
        dralet.atomic_write(self._record, json.dumps(programmed, sort_keys=True).encode())

    def _index(self, claim: dralet.ClaimRef, device: str) -> int:
        prefix, _, number = device.partition("-")
        if prefix != "fpga" or not number.isdigit() or int(number) >= self.count:
            raise dralet.ClaimError(claim.uid, f"no such FPGA {device!r}")
        return int(number)

    def _bitstream(self, device: dralet.AllocatedDevice) -> str:
        chosen = self.bitstream
        for parameters in device.config:  # in precedence order: the last one wins
            chosen = str(parameters.get("bitstream", chosen))
        return chosen

    async def devices(self) -> Sequence[dralet.Device]:
        return [
            dralet.Device(
                name=f"fpga-{i}",
                attributes={"model": "ACME-F1", "index": i, "firmware": dralet.Version("2.1.0")},
                capacity={"logicCells": "1M"},
            )
            for i in range(self.count)
        ]

    async def prepare(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice
    ) -> dralet.PreparedDevice:
        index = self._index(claim, device.device)
        bitstream = self._bitstream(device)
        async with self._lock.acquire():
            programmed = self._programmed()
            holder = programmed.get(device.device, {}).get("claim")
            if holder and holder != claim.uid:
                raise dralet.ClaimError(claim.uid, f"{device.device} is programmed for {holder}")
            programmed[device.device] = {"claim": claim.uid, "bitstream": bitstream}
            self._save(programmed)
        return dralet.PreparedDevice(
            edits=dralet.ContainerEdits(
                env=(f"ACME_FPGA_{index}_BITSTREAM={bitstream}",),
                device_nodes=(
                    dralet.DeviceNode(path=f"/dev/acme-fpga{index}", host_path="/dev/null"),
                ),
            ),
            state={"bitstream": bitstream},
        )

    async def release(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> None:
        async with self._lock.acquire():
            programmed = self._programmed()
            if programmed.get(device.device, {}).get("claim") == claim.uid:
                del programmed[device.device]
                self._save(programmed)

    async def devices_in_use(self) -> Mapping[str, str]:
        return {name: entry["claim"] for name, entry in self._programmed().items()}

    async def survives_reboot(
        self, device: dralet.AllocatedDevice, state: Mapping[str, Any]
    ) -> bool:
        return False  # a power cycle clears the FPGA: dralet releases it after a reboot

    async def health(self) -> Mapping[str, dralet.DeviceHealth]:
        return {
            f"fpga-{i}": dralet.DeviceHealth(dralet.HealthStatus.HEALTHY) for i in range(self.count)
        }


def factory(settings: dralet.Settings, config: dralet.DriverConfig) -> AcmeFPGAs:
    """``dralet.BackendFactory``: ``--driver-config`` is YAML with ``devices`` (default 2)
    and ``bitstream``; ``--driver-option devices=N`` overrides the file."""
    values = {**config.load(), **config.options}
    unknown = sorted(set(values) - {"devices", "bitstream"})
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)} (known: devices, bitstream)")
    count = int(values.get("devices", 2))
    if count < 1:
        raise ValueError(f"devices: expected at least 1, got {count}")
    bitstream = str(values.get("bitstream", DEFAULT_BITSTREAM))
    return AcmeFPGAs(state_dir=settings.state_dir, count=count, bitstream=bitstream)
