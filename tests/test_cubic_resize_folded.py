"""Verification runs a result folded at once where its graph has a cubic Resize of constants
(folded_only.resizes_constants_cubically), rather than opening an unfolded session that fails
first (vit_focus: one session and a failed run fewer); the fallback still catches the rest."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from click.testing import CliRunner
from onnx import helper

from onnxsurgery import folded_only
from onnxsurgery.running import verify
from onnxsurgery.cli import main
from test_unfolded_sessions import _cubic_position_model


def _with_resize(model: onnx.ModelProto, data: str | None = None, mode: bytes | None = None) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    resize = next(n for n in out.graph.node if n.op_type == "Resize")
    if data is not None:
        resize.input[0] = data
    if mode is not None:
        next(a for a in resize.attribute if a.name == "mode").s = mode
    return out


def test_a_cubic_resize_of_the_position_table_is_told():
    model = _cubic_position_model()
    assert folded_only.resizes_constants_cubically(model)
    assert not folded_only.resizes_constants_cubically(_with_resize(model, mode=b"linear"))
    assert not folded_only.resizes_constants_cubically(_with_resize(model, data="x"))  # an input's values
    assert not folded_only.resizes_constants_cubically(None)


def test_the_table_as_an_overridable_input_is_not_a_constant():
    model = _cubic_position_model()
    model.graph.input.append(helper.make_tensor_value_info("pos", onnx.TensorProto.FLOAT, [1, 64, 8]))
    assert not folded_only.resizes_constants_cubically(model)


def test_the_fallback_still_catches_what_the_test_misses(tmp_path, monkeypatch):
    """With the up-front test blind, the unfolded session fails and the folded one takes over."""
    monkeypatch.setattr(verify, "resizes_constants_cubically", lambda model: False)
    src, dst = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(_cubic_position_model(), src)
    result = CliRunner().invoke(main, ["quant", str(src), str(dst)])
    assert result.exit_code == 0, result.output
    assert "relative L2" in result.output
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 5, 5)).astype(np.float32)}
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.1
