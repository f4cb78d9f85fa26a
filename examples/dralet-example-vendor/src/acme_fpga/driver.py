"""The Acme FPGA backend and the factory ``dralet run --driver acme-fpga`` calls.

A ``dralet.ClaimBackend`` written with plain ``def`` methods, as a driver over a blocking
vendor library would be: dralet runs each call in a thread pool, bounded by
``backend_call_timeout``.

The "hardware" is a record of which claim each FPGA is programmed for, kept in the
state dir dralet gives the driver (``fpgas.json``), so that a restarted driver and
``devices_in_use`` see what the cards see. Opaque device configuration, applied in
precedence order (DeviceClass configs, then the claim's; the later wins):

- ``{"bitstream": "crc32.bit"}`` from either source picks the bitstream (otherwise the
  driver's default from ``--driver-config``);
- ``{"clockMHz": 300}`` is honoured only from a DeviceClass (the cluster admin's): a
  claim cannot overclock the card, and asking to is an error for that claim.
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
DEFAULT_CLOCK_MHZ = 250


class AcmeFPGAs:
    """``count`` FPGAs named ``fpga-0`` … ``fpga-<count-1>`` (a ``dralet.ClaimBackend``)."""

    def __init__(self, *, state_dir: Path, count: int, bitstream: str = DEFAULT_BITSTREAM) -> None:
        self.count = count
        self.bitstream = bitstream
        self._record = state_dir / "fpgas.json"
        self._lock = dralet.FileLock(state_dir / "fpgas.lock")

    def _programmed(self) -> dict[str, dict[str, Any]]:
        try:
            data: dict[str, dict[str, Any]] = json.loads(self._record.read_text())
            return data
        except FileNotFoundError:
            return {}

    def _save(self, programmed: Mapping[str, Mapping[str, Any]]) -> None:
        dralet.atomic_write(self._record, json.dumps(programmed, sort_keys=True).encode())

    def _index(self, claim: dralet.ClaimRef, device: str) -> int:
        prefix, _, number = device.partition("-")
        if prefix != "fpga" or not number.isdigit() or int(number) >= self.count:
            raise dralet.ClaimError(claim.uid, f"no such FPGA {device!r}")
        return int(number)

    def settings_for(
        self, claim: dralet.ClaimRef, device: dralet.AllocatedDevice
    ) -> dict[str, Any]:
        """The bitstream and clock of ``device``: its configs in precedence order."""
        chosen: dict[str, Any] = {"bitstream": self.bitstream, "clockMHz": DEFAULT_CLOCK_MHZ}
        for config in device.configs:  # class configs first, then the claim's: last wins
            if "bitstream" in config.parameters:
                chosen["bitstream"] = str(config.parameters["bitstream"])
            if "clockMHz" in config.parameters:
                if config.source != "class":
                    raise dralet.ClaimError(
                        claim.uid, "clockMHz may only be set by a DeviceClass, not by a claim"
                    )
                chosen["clockMHz"] = int(config.parameters["clockMHz"])
        return chosen

    def devices(self) -> Sequence[dralet.Device]:
        """The cards, in index order."""
        return [
            dralet.Device(
                name=f"fpga-{i}",
                attributes={"model": "ACME-F1", "index": i, "firmware": dralet.Version("2.1.0")},
                capacity={"logicCells": "1M"},
            )
            for i in range(self.count)
        ]

    def prepare_claim(self, allocation: dralet.ClaimAllocation) -> Sequence[dralet.PreparedDevice]:
        """Program every FPGA of the claim, all or none: the configs are checked for
        every device before any card is touched."""
        claim = allocation.claim
        chosen = [
            (self._index(claim, d.device), d, self.settings_for(claim, d))
            for d in allocation.devices
        ]
        with self._lock.hold():
            programmed = self._programmed()
            for _, device, _ in chosen:
                holder = programmed.get(device.device, {}).get("claim")
                if holder and holder != claim.uid:
                    raise dralet.ClaimError(
                        claim.uid, f"{device.device} is programmed for {holder}"
                    )
            for _, device, settings in chosen:
                programmed[device.device] = {"claim": claim.uid, **settings}
            self._save(programmed)
        return [
            dralet.PreparedDevice(
                edits=dralet.ContainerEdits(
                    env=(
                        f"ACME_FPGA_{index}_BITSTREAM={settings['bitstream']}",
                        f"ACME_FPGA_{index}_CLOCK_MHZ={settings['clockMHz']}",
                    ),
                    device_nodes=(
                        dralet.DeviceNode(path=f"/dev/acme-fpga{index}", host_path="/dev/null"),
                    ),
                ),
                state=settings,
            )
            for index, _, settings in chosen
        ]

    def release_claim(
        self, allocation: dralet.ClaimAllocation, states: Sequence[Mapping[str, Any]]
    ) -> None:
        """Clear every FPGA still programmed for the claim."""
        with self._lock.hold():
            programmed = self._programmed()
            for device in allocation.devices:
                if programmed.get(device.device, {}).get("claim") == allocation.claim.uid:
                    del programmed[device.device]
            self._save(programmed)

    def devices_in_use(self) -> Mapping[str, str]:
        """The cards' own record of the claim each is programmed for."""
        return {name: str(entry["claim"]) for name, entry in self._programmed().items()}

    def survives_reboot(self, device: dralet.AllocatedDevice, state: Mapping[str, Any]) -> bool:
        """A power cycle clears the FPGA: dralet releases it after a reboot."""
        return False

    def health(self) -> Mapping[str, dralet.DeviceHealth]:
        """Every card is healthy."""
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
