"""Issue 58 (cpu17): where the weights outgrow the page cache and nothing is held, the plan
measures them last first and the pass rounds them first to last, so that the pass starts on what
the plan read last (still cached), not on what the cache dropped first. The plan's results, and
the files, stay the same."""

from __future__ import annotations

import threading

import onnx
import pytest
from onnx import numpy_helper

import builders
import onnxsurgery
from onnxsurgery.parallel import last_first_map, ordered_map
from onnxsurgery.quantization import apply as apply_module
from onnxsurgery.quantization import held_roundings
from onnxsurgery.quantization.choices import lean, symmetry


@pytest.mark.parametrize("workers", [1, 2])
def test_last_first_map_computes_last_first_and_answers_in_order(workers):
    items = list(range(9))
    computed, lock = [], threading.Lock()

    def fn(i):
        with lock:
            computed.append(i)
        return i * i

    got = list(last_first_map(fn, iter(items), size=lambda i: 1, budget=1, workers=workers))
    assert got == list(ordered_map(lambda i: i * i, items, size=lambda i: 1, budget=1, workers=workers))
    assert computed == items[::-1]  # a budget of one item: one at a time, the last first


def _model() -> onnx.ModelProto:
    model = builders.quant_cases()
    for i in range(3):  # a chain of wide MatMuls: weights the plan measures whole
        model.graph.initializer.append(numpy_helper.from_array(builders.rand((64, 64), i) * 0.05, f"W{i}"))
        model.graph.node.append(onnx.helper.make_node("MatMul", ["h2" if i == 0 else f"w{i - 1}", f"W{i}"], [f"w{i}"]))
    model.graph.output.append(builders.vi("w2", shape=[2, 64]))
    return model


@pytest.mark.parametrize("mode", ["cached", "outgrown", "held"])
@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_the_plan_reads_the_weights_in_the_reverse_of_the_pass_where_they_outgrow_the_cache(tmp_path, monkeypatch,
                                                                                            dtype, mode):
    """Last first only where the weights outgrow the page cache and nothing is held; held, the
    pass reads none again and the plan walks first to last, as the reference's run beside it."""
    src = tmp_path / "in.onnx"
    onnx.save(_model(), str(src))
    lean_reads, symmetry_reads, pass_reads = [], [], []
    for module, log in ((lean, lean_reads), (symmetry, symmetry_reads), (apply_module, pass_reads)):
        real = module.read_values
        monkeypatch.setattr(module, "read_values", lambda t, real=real, log=log: log.append(t.name) or real(t))
    onnxsurgery.quant_file(src, tmp_path / "alone.onnx", dtype=dtype, min_elements=1024, verify=False)
    pass_order = list(pass_reads)  # taken from a run that holds nothing: held, the pass reads fewer
    if mode != "cached":  # as if the weights outgrew the page cache
        monkeypatch.setattr(held_roundings, "HOLD_FROM_MEMORY_SHARE", 0)
        monkeypatch.setattr(held_roundings, "HOLD_FOUR_BIT", mode == "held")
        if mode == "outgrown":
            monkeypatch.setattr(held_roundings, "HELD_BYTES", 0)  # nothing held
        lean_reads.clear(), symmetry_reads.clear()
        onnxsurgery.quant_file(src, tmp_path / "again.onnx", dtype=dtype, min_elements=1024, verify=False)
        assert (tmp_path / "again.onnx").read_bytes() == (tmp_path / "alone.onnx").read_bytes()
    assert len(lean_reads + symmetry_reads) >= 3
    for plan_reads in (lean_reads, symmetry_reads):  # each measurement's walk (they read different weights)
        both = [n for n in pass_order if n in plan_reads]
        assert [n for n in plan_reads if n in both] == (both[::-1] if mode == "outgrown" else both)
