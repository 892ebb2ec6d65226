"""quant's plan keeps a MatMul weight on onnxruntime 1.32's crash edge (a float16 Transpose [1, 0, 2]
read as A, B a float16 constant as folded) as DequantizeLinear (choices/crash_edges.py), and the
written file opens in a default session. Default sessions are made in a child process only (as
zoo/default_load.py): a crash there must not end the test run."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery import quant_file, quant_plan
from onnxsurgery.quantization.choices import planner
from onnxsurgery.quantization.choices.crash_edges import WHY, avoid_crash_edges

CRASHES_HERE = ort.__version__.startswith("1.32.")
# a default session (ORT_ENABLE_ALL, the NchwcTransformer on) runs the model on x.npy, writes y.npy
CHILD = """import sys, numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])
np.save(sys.argv[3], s.run(None, {'x': np.load(sys.argv[2])})[0])"""


def _model(dtype=TensorProto.FLOAT16, perm=(1, 0, 2), cast_chain=False, k=64) -> onnx.ModelProto:
    """x [T, B, k] -> Transpose(perm) -> MatMul(B: a k x k weight) -> Relu: torch's batch_first
    LSTM head. `cast_chain`: the weight stored float32 and cast to float16 (a chain of constants)."""
    np_type = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    w = (np.random.default_rng(0).standard_normal((k, k)) / 8).astype(np.float32 if cast_chain else np_type)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=list(perm), name="swap")]
    if cast_chain:
        nodes.append(helper.make_node("Cast", ["w"], ["w16"], to=TensorProto.FLOAT16, name="to_half"))
    nodes += [helper.make_node("MatMul", ["xt", "w16" if cast_chain else "w"], ["h"], name="proj"),
              helper.make_node("Relu", ["h"], ["y"], name="act")]
    shape = ["T", "B", k] if perm[2] == 2 else ["B", k, "T"]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", dtype, shape)],
                          [helper.make_tensor_value_info("y", dtype, None)], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _default_run(path, x, tmp_path) -> tuple[int, np.ndarray | None]:
    """(return code, output) of a default session of `path` on `x`, in a child process."""
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                       capture_output=True, text=True, timeout=300)
    return r.returncode, (np.load(tmp_path / "y.npy") if r.returncode == 0 else None)


def _input_run(path, x) -> np.ndarray:
    """The input computed as verification does (the NchwcTransformer off: it loads)."""
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"], disabled_optimizers=["NchwcTransformer"])
    return s.run(None, {"x": x})[0]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


@pytest.mark.parametrize("options", [{}, {"dtype": "uint8"}, {"dtype": "int4"}, {"target": "tensorrt"},
                                     {"target": "onnxruntime"}, {"target": "onnxruntime-web"},
                                     {"keep_quantized": True}])
def test_what_quant_writes_opens_in_a_default_session(tmp_path, options):
    src, out = tmp_path / "half.onnx", tmp_path / "q.onnx"
    onnx.save(_model(), src)
    x = np.random.default_rng(1).standard_normal((5, 3, 64)).astype(np.float16)
    if CRASHES_HERE:  # the input itself dies in a default session: the edge is real here
        assert _default_run(src, x, tmp_path)[0] < 0
    report = quant_file(src, out, min_elements=16, samples=[{"x": x}], **options)
    rc, y = _default_run(out, x, tmp_path)
    assert rc == 0
    said = report.verification["rel_l2_error"]
    assert _rel(_input_run(src, x), y) <= said * 1.01 + 1e-4  # what verification measured, in a default session
    assert "NchwcTransformer" not in report.verification["runtime"]


def test_the_plan_says_why_and_is_dq(tmp_path):
    src = tmp_path / "half.onnx"
    onnx.save(_model(), src)
    (record,) = quant_plan(src, min_elements=16).weights
    assert (record.lowering, record.granularity, record.why) == ("dq", "channel", WHY)


def test_a_lowering_asked_for_is_kept_and_the_report_names_the_edge(tmp_path):
    """Before the rule every default plan wrote such a folded form; asked for, it still is."""
    src, out = tmp_path / "half.onnx", tmp_path / "q.onnx"
    onnx.save(_model(), src)
    report = quant_file(src, out, min_elements=16, lowering="arith")
    assert [w["lowering"] for w in report.weights] == ["arith"]
    if CRASHES_HERE:
        assert "NchwcTransformer" in report.verification["runtime"]
        assert _default_run(out, np.zeros((2, 1, 64), np.float16), tmp_path)[0] < 0


def test_a_cast_chain_to_float16_is_on_the_edge(tmp_path):
    src = tmp_path / "chain.onnx"
    onnx.save(_model(TensorProto.FLOAT, cast_chain=True), src)
    (record,) = quant_plan(src, min_elements=16).weights
    assert record.lowering == "dq" and record.why == WHY


def _without_the_rule(monkeypatch):
    monkeypatch.setattr(planner, "STAGES", tuple(s for s in planner.STAGES if s is not avoid_crash_edges))


@pytest.mark.parametrize("model", [_model(TensorProto.FLOAT), _model(perm=(0, 2, 1))], ids=["float32", "no_edge"])
@pytest.mark.parametrize("options", [{}, {"dtype": "int4"}, {"target": "tensorrt"}])
def test_models_without_the_edge_plan_as_without_the_rule(tmp_path, monkeypatch, model, options):
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    with_rule = quant_plan(src, min_elements=16, **options).to_dict()
    _without_the_rule(monkeypatch)
    assert quant_plan(src, min_elements=16, **options).to_dict() == with_rule
    assert WHY not in with_rule


def test_the_rule_decides_only_where_the_plan_would_fold(tmp_path, monkeypatch):
    src = tmp_path / "half.onnx"
    onnx.save(_model(), src)
    _without_the_rule(monkeypatch)
    (before,) = quant_plan(src, min_elements=16).weights
    assert before.lowering not in ("dq", "matmulnbits")  # what main planned: a folded form


@pytest.mark.parametrize("command", ["quant", "shrink", "compare"])
def test_commands_given_samples_run_such_a_model(tmp_path, command):
    """With --inputs, sessions take onnxruntime's NCHWc layout (sessions.session_settings): its
    transformer died on the input's own session (signal 11) before it was left off for such a model."""
    src = tmp_path / "half.onnx"
    onnx.save(_model(), src)
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(1).standard_normal((5, 3, 64)).astype(np.float16))
    second = {"quant": [str(tmp_path / "q.onnx"), "--min-elements", "16"],
              "shrink": [str(tmp_path / "s.onnx"), "--verify"], "compare": [str(src)]}[command]
    r = subprocess.run([sys.executable, "-m", "onnxsurgery", command, str(src), *second,
                        "--inputs", str(tmp_path / "x.npz")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-400:]
