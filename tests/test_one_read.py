"""Issue 58 (oneread15): the plan's read of a weight rounds it for the pass (shared_rounding.holding),
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
from onnxsurgery.quantization import shared_rounding
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
    monkeypatch.setattr(shared_rounding, "HOLD_FROM_MEMORY_SHARE", 0)  # as if it outgrew the page cache
    monkeypatch.setattr(shared_rounding, "HOLD_FOUR_BIT", True)  # off by default: the mechanism is tested
    monkeypatch.setattr(shared_rounding, "HELD_BYTES", budget)
    reads = []
    real = apply_module.read_values
    monkeypatch.setattr(apply_module, "read_values", lambda t: reads.append(t.name) or real(t))
    held = tmp_path / "held.onnx"
    onnxsurgery.quant_file(src, held, dtype=dtype, min_elements=1024, verify=False)
    read_held = sorted(reads)
    reads.clear()
    monkeypatch.setattr(shared_rounding, "HELD_BYTES", 0)  # nothing held
    alone = tmp_path / "alone.onnx"
    onnxsurgery.quant_file(src, alone, dtype=dtype, min_elements=1024, verify=False)
    assert held.read_bytes() == alone.read_bytes()
    assert "Wide" in reads and "Wide" not in read_held and set(read_held) < set(reads)
    assert not shared_rounding._HELD and not shared_rounding._HOLD["held"]  # dropped when the pass closed
    assert shared_rounding._SPILL == {"folder": None, "file": None}
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
    assert not keep_whole(values, site, scheme, "dq", False, args)  # outside `holding`: nothing made
    with shared_rounding.holding(values.size - 1):
        assert not keep_whole(values, site, scheme, "dq", False, args)  # past the budget
    with shared_rounding.holding(1 << 20):
        assert keep_whole(values, site, scheme, "dq", False, args)
        assert kept_whole(site, scheme, "dq", False, {**args, "symmetric": False}) is None  # another form
        qt, error = kept_whole(site, scheme, "dq", False, args)
        assert kept_whole(site, scheme, "dq", False, args) is None  # handed over once
        assert np.array_equal(qt.dequantize().shape, values.shape) and error["rel_l2_error"] > 0
        assert not shared_rounding._HOLD["held"]


def test_nothing_held_for_weights_the_page_cache_keeps(monkeypatch):
    assert shared_rounding.hold_budget(1 << 20) == 0  # 1 MB: on any machine these tests run on
    monkeypatch.setattr(shared_rounding, "HOLD_FROM_MEMORY_SHARE", 0)
    assert shared_rounding.hold_budget(1 << 20) == shared_rounding.HELD_BYTES
    assert shared_rounding.hold_budget(1 << 20, four_bit=True) == 0  # 4-bit: the CPU costs more than the read
