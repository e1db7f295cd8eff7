"""stages/memory.py: what a step freed goes back to the system before the next step."""

import ctypes.util
import sys

import pytest

from rollout_assets.stages.memory import return_freed_memory


def _resident_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None, reason="glibc's malloc_trim"
)
def test_memory_a_step_freed_is_handed_back() -> None:
    # Objects beyond Python's small-object allocator come from the C allocator, which keeps
    # the pages they freed while anything above them is still in use (here every 64th).
    held = [f"{n:08d}" + "x" * 1_000 for n in range(100_000)]
    holding = _resident_kib()
    kept = held[::64]
    del held
    freed_but_kept = _resident_kib()
    return_freed_memory()
    handed_back = _resident_kib()
    assert holding - handed_back > 50_000, (holding, freed_but_kept, handed_back)
    assert handed_back < freed_but_kept - 20_000, (holding, freed_but_kept, handed_back)
    assert len(kept) == 1_563
