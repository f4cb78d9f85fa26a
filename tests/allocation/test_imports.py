"""The allocator and the simulation load no event loop: asyncio's objects would be
scanned by every garbage collection of an allocation run (``bench_allocation.py``)."""

from __future__ import annotations

import subprocess
import sys


def test_allocating_loads_no_asyncio() -> None:
    script = (
        "import sys\n"
        "from dralet.allocation import allocator, cel, manifests, simulation\n"
        "from dralet import errors\n"
        "print('asyncio' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_what_goes_up_names_a_cancellation_once_asked_for() -> None:
    import asyncio

    from dralet import errors

    assert asyncio.CancelledError in errors.GOES_UP
    assert errors.IrreversibleError in errors.GOES_UP
    assert errors.GOES_UP is errors.GOES_UP  # made once
