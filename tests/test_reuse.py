"""quantization/reuse.py: an integers' array is made from an earlier one's memory only once
nothing refers to that memory, and only within `lending`."""

import numpy as np

from onnxsurgery.quantization import reuse

SHAPE = (1024, 2048)  # 2 MiB of int8: above reuse.FROM_BYTES


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_memory_is_reused_only_once_nothing_refers_to_it():
    with reuse.lending():
        first = reuse.empty(SHAPE, np.int8)
        first[:] = 7
        where = _address(first)
        view = first[5:]
        held = memoryview(np.ascontiguousarray(first).reshape(-1)).cast("B")
        del first
        second = reuse.empty(SHAPE, np.int8)
        assert _address(second) != where  # a view and a memoryview still read it
        assert view[0, 0] == 7 and held[0] == 7
        del view
        assert _address(reuse.empty(SHAPE, np.int8)) != where  # the memoryview still does
        del held
        third = reuse.empty(SHAPE, np.uint8)
        assert _address(third) == where
        assert third.shape == SHAPE and third.dtype == np.uint8


def test_outside_lending_and_small_arrays_are_new():
    reuse.empty(SHAPE, np.int8)
    assert not reuse._owners
    with reuse.lending():
        small = reuse.empty((16, 16), np.int8)
        assert small.base is None  # np.empty's own
    assert not reuse._owners


def test_unused_memory_kept_is_bounded_and_given_back():
    with reuse.lending():
        for rows in range(1, 40):  # sizes never asked for twice: nothing reused
            reuse.empty((rows, 1 << 20), np.int8)
        last, *unused = sorted(reuse._owners, key=lambda o: -o.size)  # the last one asked for: the largest
        assert last.size == 39 << 20
        assert sum(o.size for o in unused) <= reuse.KEPT_BYTES and len(unused) == 7  # 1 + ... + 7 MiB
        del last, unused
    assert not reuse._owners
