"""running/heap.py's reused_pages: a freed large block is handed out again from the heap instead
of being mapped afresh (and faulted in, zeroed) at each allocation; glibc's thresholds are set
back to their dynamic ceiling after it."""

import resource
import sys

import numpy as np
import pytest

from onnxsurgery.running.heap import reused_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

BLOCK = 96 * 2**20  # over glibc's 32 MiB mmap ceiling: mapped afresh each time by default


def _faults(rounds: int = 4) -> int:
    """Minor faults of allocating, touching and freeing a BLOCK-sized array `rounds` times."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(rounds):
        a = np.ones(BLOCK // 4, np.float32)
        del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_freed_block_is_reused_within_and_mapped_afresh_after():
    fresh = _faults()
    with reused_pages():
        _faults(1)  # the first block grows the heap: its pages are new
        reused = _faults()
    after = _faults()
    assert reused * 4 < fresh, (fresh, reused)
    assert after * 2 > fresh, (fresh, after)  # the thresholds back at glibc's ceiling


def test_inactive_changes_nothing():
    fresh = _faults()
    with reused_pages(False):
        _faults(1)
        assert _faults() * 2 > fresh
