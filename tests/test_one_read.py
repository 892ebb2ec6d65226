"""Issue 58 (oneread15): the plan's read of a weight rounds it for the pass (held_roundings.HeldRoundings),
so the pass reads only the weights whose settled form the plan did not round; the written file
is the same byte for byte as when nothing is held."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import builders
import onnxsurgery
from onnxsurgery.quantization import apply as apply_module
from onnxsurgery.quantization import held_roundings
from onnxsurgery.quantization.held_roundings import HeldRoundings
from onnxsurgery.quantization.options import Scheme


def _model() -> onnx.ModelProto:
    model = builders.quant_cases()
    model.graph.initializer.append(numpy_helper.from_array(builders.rand((64, 512), 3) * 0.05, "Wide"))
    model.graph.node.append(onnx.helper.make_node("MatMul", ["h2", "Wide"], ["w"]))
    model.graph.output.append(builders.vi("w", shape=[2, 512]))
    return model


@pytest.mark.parametrize("dtype", ["int8", "int4"])
@pytest.mark.parametrize("budget", [1 << 30, 1])  # held in memory; past a budget of 1 byte, in a file
def test_the_pass_reads_fewer_weights_and_writes_the_same_file(tmp_path, monkeypatch, dtype, budget):
    src = tmp_path / "in.onnx"
    onnx.save(_model(), str(src))
    monkeypatch.setattr(held_roundings, "HOLD_FROM_MEMORY_SHARE", 0)  # as if it outgrew the page cache
    monkeypatch.setattr(held_roundings, "HOLD_FOUR_BIT", True)  # off by default: the mechanism is tested
    monkeypatch.setattr(held_roundings, "HELD_BYTES", budget)
    opened = []
    real_init = HeldRoundings.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(HeldRoundings, "__init__", init)
    reads = []
    real = apply_module.read_values
    monkeypatch.setattr(apply_module, "read_values", lambda t: reads.append(t.name) or real(t))
    held = tmp_path / "held.onnx"
    onnxsurgery.quant_file(src, held, dtype=dtype, min_elements=1024, verify=False)
    read_held = sorted(reads)
    reads.clear()
    monkeypatch.setattr(held_roundings, "HELD_BYTES", 0)  # nothing held
    alone = tmp_path / "alone.onnx"
    onnxsurgery.quant_file(src, alone, dtype=dtype, min_elements=1024, verify=False)
    assert held.read_bytes() == alone.read_bytes()
    assert "Wide" in reads and "Wide" not in read_held and set(read_held) < set(reads)
    assert opened and all(not h._kept and not h.held and h._spill is None for h in opened)  # closed with the pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.onnx", "held.onnx", "in.onnx"]  # no file left


def test_held_only_within_the_budget_and_taken_once_for_the_same_rounding():
    from onnxsurgery.quantization.quantize import keep_whole, kept_whole

    site = type("Site", (), {})()
    site.tensor, site.name = object(), "W"
    values = builders.rand((64, 32), 1)
    site.shape, site.onnx_dtype = values.shape, onnx.TensorProto.FLOAT
    args = {"dtype": "int8", "granularity": "channel", "block_size": None, "symmetric": True,
            "half_scales": True, "search_clip": False, "importance": None}
    scheme = Scheme("channel", 0)
    assert not keep_whole(values, site, scheme, "dq", False, args)  # no HeldRoundings: nothing made
    with HeldRoundings(values.size - 1) as held:
        assert not keep_whole(values, site, scheme, "dq", False, args, held)  # past the budget
    with HeldRoundings(1 << 20) as held, HeldRoundings(1 << 20) as other:
        assert keep_whole(values, site, scheme, "dq", False, args, held)
        assert kept_whole(site, scheme, "dq", False, args, other) is None  # another pass's: its own
        assert kept_whole(site, scheme, "dq", False, {**args, "symmetric": False}, held) is None  # another form
        assert kept_whole(site, scheme, "dq", False, args, held, peek=True)
        qt, error = kept_whole(site, scheme, "dq", False, args, held)
        assert kept_whole(site, scheme, "dq", False, args, held) is None  # handed over once
        assert np.array_equal(qt.dequantize().shape, values.shape) and error["rel_l2_error"] > 0
        assert not held.held
    assert not held.has_room(1) and not held.hold(None, ("k",), qt, error)  # closed: nothing more


def test_nothing_held_for_weights_the_page_cache_keeps(monkeypatch):
    assert held_roundings.hold_budget(1 << 20) == 0  # 1 MB: on any machine these tests run on
    assert held_roundings.hold_budget(1 << 30, memory=4 << 30) == 0
    assert held_roundings.hold_budget(2 << 30, memory=4 << 30) == held_roundings.HELD_BYTES
    monkeypatch.setattr(held_roundings, "HOLD_FROM_MEMORY_SHARE", 0)
    assert held_roundings.hold_budget(1 << 20) == held_roundings.HELD_BYTES
    assert held_roundings.hold_budget(1 << 20, four_bit=True) == 0  # 4-bit: the CPU costs more than the read


@pytest.mark.parametrize("limit, expected", [("max\n", 1 << 40), ("8589934592\n", 8 << 30), (None, 1 << 40)])
def test_the_gate_reads_a_cgroups_memory_limit_where_one_is_set(tmp_path, monkeypatch, limit, expected):
    import os

    sysconf = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": (1 << 40) // 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: sysconf[name])
    paths = []
    if limit is not None:
        (tmp_path / "memory.max").write_text(limit)
        paths.append(str(tmp_path / "memory.max"))
    monkeypatch.setattr(held_roundings, "CGROUP_LIMITS", (*paths, str(tmp_path / "absent")))
    assert held_roundings.cache_memory() == expected
    # a 6 GB model: held in an 8 GB cgroup of a 1 TB machine, not on the machine alone
    assert bool(held_roundings.hold_budget(6 << 30)) == (expected == 8 << 30)
