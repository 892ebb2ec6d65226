"""quant's verification runs the result folded where that pays (running/fold_pays.py): on the
user's samples, with Conv nodes reading most of the weights; unfolded elsewhere."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from onnxsurgery.running import runs
from onnxsurgery.running.fold_pays import conv_weights_dominate
from onnxsurgery.running.verify import compare_models

from conftest import builders


def _conv_and_matmul(conv_out: int, mm_cols: int, through_cast: bool = False) -> onnx.ModelProto:
    """x [1, 8, 8, 8] -> Conv (conv_out filters of 8x3x3) -> GlobalAveragePool -> Flatten -> MatMul."""
    rng = np.random.default_rng(0)
    wc = (rng.standard_normal((conv_out, 8, 3, 3)) * 0.1).astype(np.float32)
    wm = (rng.standard_normal((conv_out, mm_cols)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "Wc16" if through_cast else "Wc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "Wm"], ["y"])]
    inits = [numpy_helper.from_array(wm, "Wm")]
    if through_cast:
        nodes.insert(0, helper.make_node("Cast", ["Wc_h"], ["Wc16"], to=TensorProto.FLOAT))
        inits.append(numpy_helper.from_array(wc.astype(np.float16), "Wc_h"))
    else:
        inits.append(numpy_helper.from_array(wc, "Wc"))
    return builders.model(nodes, [builders.vi("x", shape=[1, 8, 8, 8])], [builders.vi("y", shape=[1, mm_cols])],
                          inits)


def test_conv_weights_dominate_by_their_share_of_the_bytes():
    assert conv_weights_dominate(_conv_and_matmul(64, 16))  # 18 KB of Conv weights, 4 KB of MatMul's
    assert not conv_weights_dominate(_conv_and_matmul(16, 512))  # 4.6 KB against 32 KB
    assert conv_weights_dominate(_conv_and_matmul(64, 16, through_cast=True))  # a float16 weight cast before it
    assert not conv_weights_dominate(None)


def _folds(monkeypatch, reference, candidate, **kw) -> list:
    seen = []
    real = runs.open_session

    def record(model, **options):
        if str(model) == str(candidate):
            seen.append(options.get("fold_constants"))
        return real(model, **options)

    monkeypatch.setattr(runs, "open_session", record)
    compare_models(reference, candidate, fold_candidate=None, **kw)
    return seen


def test_the_result_folds_on_the_users_samples_where_conv_dominates(tmp_path, monkeypatch):
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 8, 8, 8)).astype(np.float32)} for i in range(2)]
    for name, model, given, folded in [("conv", _conv_and_matmul(64, 16), True, True),
                                       ("conv_generated", _conv_and_matmul(64, 16), False, False),
                                       ("matmul", _conv_and_matmul(16, 512), True, False)]:
        src, out = tmp_path / f"{name}.onnx", tmp_path / f"{name}.q.onnx"
        onnx.save(model, src)
        onnxsurgery.quant_file(src, out, min_elements=16, verify=False)
        seen = _folds(monkeypatch, src, out, samples=samples if given else None)
        assert seen == [folded], name


def test_a_folded_verification_reports_what_a_default_session_computes(tmp_path, monkeypatch):
    src, out = tmp_path / "in.onnx", tmp_path / "q.onnx"
    onnx.save(_conv_and_matmul(64, 16), src)
    # 2 samples: too few for measured choices, so no candidate runs and verification runs the result
    # itself (with 3, the int4 weights clipped by the samples race the data-free plan, inputs18, and
    # verification takes the kept candidate's outputs)
    samples = [{"x": np.random.default_rng(i).standard_normal((1, 8, 8, 8)).astype(np.float32)} for i in range(2)]
    seen = []
    real = runs.open_session
    monkeypatch.setattr(runs, "open_session", lambda m, **o: seen.append(o.get("fold_constants")) or real(m, **o))
    report = onnxsurgery.quant_file(src, out, min_elements=16, dtype="int4", samples=samples)
    assert False not in seen and True in seen  # the result's session folded
    ref, got = ort.InferenceSession(str(src)), ort.InferenceSession(str(out))  # a user's default sessions
    worst = max(float(np.linalg.norm(got.run(None, s)[0].astype(np.float64) - ref.run(None, s)[0])
                      / np.linalg.norm(ref.run(None, s)[0].astype(np.float64))) for s in samples)
    assert worst > 0
    assert abs(report.verification["rel_l2_error"] - worst) <= 1e-6 * worst
