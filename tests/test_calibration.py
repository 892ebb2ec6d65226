"""quant --calibration: second moments captured in onnxruntime, GPTQ rounding, the saved file."""

import re

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from conftest import builders, run
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.quantization.calibration import Calibration
from onnxsurgery.quantization.moments import Moments, calibrated_rounding
from onnxsurgery.quantization.input_rows import Reader, input_columns
from onnxsurgery.graph_utils import collect_constants
from onnxsurgery.quantization.gptq import inverse_cholesky, matrix_order, quantize_with_factor
from onnxsurgery.quantization.rounding import RANGES, quantize


def quantize_with_hessian(x, hessian, **options):
    """GPTQ of `x` for inputs with second moments `hessian`, as the quantize pass runs it
    (moments.py: the inverse Cholesky factor of H, then quantize_with_factor)."""
    return quantize_with_factor(x, inverse_cholesky(hessian), **options)


@pytest.mark.parametrize("attrs", [
    dict(pads=[1, 1, 1, 1]),
    dict(pads=[0, 2, 1, 0], strides=[2, 1], dilations=[1, 2]),
    dict(),
])
def test_unfolded_conv_input_times_weight_matrix_is_the_conv(attrs):
    # input_columns + gptq's matrix order must reproduce onnxruntime's Conv exactly (up to
    # float rounding): otherwise H would describe some other product.
    w = builders.rand((6, 5, 3, 2), 1)
    m = builders.model([helper.make_node("Conv", ["x", "W"], ["y"], **attrs)],
                       [builders.vi("x", shape=[2, 5, 7, 9])], [builders.vi("y", shape=list("nmhw"))],
                       [numpy_helper.from_array(w, "W")])
    x = builders.rand((2, 5, 7, 9), 2)
    y = run(m, {"x": x})[0]  # [N, M, *out]
    cols = np.concatenate(list(input_columns(x, Reader("x", "Conv", attrs), w.shape)))
    matrix = np.transpose(w, matrix_order(4, 0, 1)).reshape(6, -1)
    got = (cols @ matrix.T).reshape(2, *y.shape[2:], 6).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, y, rtol=1e-4, atol=1e-4)


def _correlated_inputs(rows, k, seed):
    """Non-negative features in a 16-dimensional subspace (one fixed map), as a layer's inputs
    often are: what GPTQ exploits and round to nearest ignores."""
    z = np.random.default_rng(seed).standard_normal((rows, 16))
    return np.maximum(z @ np.random.default_rng(99).standard_normal((16, k)), 0)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4", "uint4"])
@pytest.mark.parametrize("granularity", ["block", "channel", "tensor"])
@pytest.mark.parametrize("symmetric", [False, True])
def test_gptq_layout_matches_quantize_and_output_error_drops(dtype, granularity, symmetric):
    k, n = 128, 48
    w = builders.rand((k, n), 3) * 0.1  # MatMul B [K, N]: channels along N, blocks along K
    x_fit, x_new = _correlated_inputs(2000, k, 4), _correlated_inputs(500, k, 5)
    opts = dict(dtype=dtype, granularity=granularity, block_size=32, symmetric=symmetric, half_scales=True)
    g = quantize_with_hessian(w, x_fit.T @ x_fit, channel_axis=1, block_axis=0, **opts)
    r = quantize(w, axis=0 if granularity == "block" else 1, **opts)
    assert g.scale.shape == r.scale.shape and g.scale.dtype == r.scale.dtype and g.q.dtype == r.q.dtype
    assert (g.zero_point is None) == (r.zero_point is None)
    qmin, qmax = RANGES[dtype]
    assert g.q.min() >= qmin and g.q.max() <= qmax and np.isfinite(g.dequantize()).all()
    out_err = lambda qt: np.linalg.norm(x_new @ (qt.dequantize() - w)) / np.linalg.norm(x_new @ w)  # noqa: E731
    assert out_err(g) < 0.75 * out_err(r), (out_err(g), out_err(r))  # on inputs it was not fitted to


def test_gptq_columns_no_input_reached_stay_finite():
    w = builders.rand((64, 16), 6)
    x = _correlated_inputs(300, 64, 7)
    x[:, 10:20] = 0  # these inputs are never non-zero in calibration
    g = quantize_with_hessian(w, x.T @ x, dtype="int8", granularity="block", channel_axis=1, block_axis=0,
                              block_size=32)
    deq = g.dequantize()
    assert np.isfinite(deq).all()
    assert np.abs(deq[10:20] - w[10:20]).max() <= g.scale.max()  # still close to the weight


def _moments(*folds):
    m = Moments(folds[0].shape[1])
    for i, x in enumerate(folds):
        m.folds[i] = x.T @ x
    return m


def _held_out_case(rows_per_fold, seed=0):
    """A MatMul weight [128, 48] (int4 blocks, where rounding choices matter most) and the
    rounding the held-out check picks, with its output error and plain rounding's on new inputs."""
    k, n = 128, 48
    w = builders.rand((k, n), 3) * 0.1
    opts = dict(dtype="int4", granularity="block", block_size=32, symmetric=False, half_scales=True)
    plain = quantize(w, axis=0, **opts)
    folds = [_correlated_inputs(rows_per_fold, k, seed + i) for i in range(2)]
    qt, refused = calibrated_rounding(w, _moments(*folds), plain, channel_axis=1, block_axis=0, **opts)
    x_new = _correlated_inputs(1000, k, 50)
    err = lambda q: np.linalg.norm(x_new @ (q.dequantize() - w)) / np.linalg.norm(x_new @ w)  # noqa: E731
    return qt, plain, refused, err(qt), err(plain)


def test_held_out_check_keeps_gptq_when_it_generalises():
    qt, plain, refused, err, err_plain = _held_out_case(1000)
    assert refused is None and qt is not plain
    assert err < 0.75 * err_plain


def test_held_out_check_refuses_a_fit_to_too_few_inputs():
    # 4 input rows per fold for 128 columns: GPTQ moves the error into directions those rows
    # never reached, and the other fold shows it
    qt, plain, refused, err, err_plain = _held_out_case(4)
    assert refused is not None and "other half" in refused
    assert qt is plain and err == err_plain


def test_held_out_check_on_a_weight_rounding_represents_exactly():
    w = np.zeros((128, 48), np.float32)
    opts = dict(dtype="int8", granularity="block", block_size=32, symmetric=False, half_scales=True)
    plain = quantize(w, axis=0, **opts)
    folds = [_correlated_inputs(100, 128, i) for i in range(2)]
    qt, refused = calibrated_rounding(w, _moments(*folds), plain, channel_axis=1, block_axis=0, **opts)
    assert qt is plain and "no better" in refused and np.all(qt.dequantize() == 0)


def test_held_out_check_needs_two_folds():
    w = builders.rand((128, 48), 3) * 0.1
    opts = dict(dtype="int8", granularity="block", block_size=32, symmetric=False, half_scales=True)
    x = _correlated_inputs(500, 128, 0)
    m = _moments(x)  # one sample: the odd fold stays empty
    assert not m.has_two_folds
    qt, refused = calibrated_rounding(w, m, quantize(w, axis=0, **opts), channel_axis=1, block_axis=0, **opts)
    assert refused is None
    expected = quantize_with_hessian(w, x.T @ x, channel_axis=1, block_axis=0, **opts)
    np.testing.assert_array_equal(qt.q, expected.q)


def _calibration_model():
    """x [32, 16] -> Relu(x @ A) (96 features in a 16-dimensional subspace; A stays float, under
    min_elements) -> MatMul W1, read
    twice (a shared weight) -> Sigmoid -> 1x1 Conv Wc (pads, stride); and a depthwise Conv Wd,
    which calibration does not support."""
    nodes = [
        helper.make_node("MatMul", ["x", "A"], ["xa"]),
        helper.make_node("Relu", ["xa"], ["h"]),
        helper.make_node("MatMul", ["h", "W1"], ["h1"]),
        helper.make_node("MatMul", ["h1", "W1"], ["h2"]),
        helper.make_node("Reshape", ["h2", "shape4"], ["img"]),           # [1, 96, 4, 8]
        helper.make_node("Sigmoid", ["img"], ["s"]),
        helper.make_node("Conv", ["s", "Wc"], ["c"], pads=[1, 0, 0, 1], strides=[1, 2]),
        helper.make_node("Conv", ["s", "Wd"], ["d"], pads=[2, 2, 2, 2], group=96),
    ]
    inits = [numpy_helper.from_array(builders.rand((16, 96), 10), "A"),
             numpy_helper.from_array(builders.rand((96, 96), 11) * 0.1, "W1"),
             numpy_helper.from_array(np.array([1, 96, 4, 8], np.int64), "shape4"),
             numpy_helper.from_array(builders.rand((64, 96, 1, 1), 12) * 0.1, "Wc"),
             numpy_helper.from_array(builders.rand((96, 1, 5, 5), 13), "Wd")]
    return builders.model(nodes, [builders.vi("x", shape=[32, 16])],
                          [builders.vi("c", shape=list("nmhw")), builders.vi("d", shape=list("nmhw"))], inits)


def _samples(seeds):
    return [{"x": np.random.default_rng(s).standard_normal((32, 16)).astype(np.float32)} for s in seeds]


def _output_errors(model, path, samples):
    """Worst relative L2 error over the samples, per output."""
    worst = None
    for feeds in samples:
        errs = [np.linalg.norm(a - b) / np.linalg.norm(a) for a, b in zip(run(model, feeds), run(path, feeds))]
        worst = errs if worst is None else np.maximum(worst, errs)
    return list(worst)


def test_calibrated_file_loads_keeps_its_size_and_has_a_smaller_output_error(tmp_path):
    model = _calibration_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    held_out = _samples(range(100, 104))
    common = dict(min_elements=2000, samples=held_out)
    plain = onnxsurgery.quant_file(src, tmp_path / "plain.onnx", **common)
    # 64 samples: enough for Wc's 96 input columns to pass the held-out check (16 are not, and
    # then it keeps ordinary rounding: test_held_out_check_*)
    cal = onnxsurgery.quant_file(src, tmp_path / "cal.onnx", calibration=_samples(range(64)), **common)
    onnx.checker.check_model(onnx.load(str(tmp_path / "cal.onnx")))
    q = cal.pass_report("quantize")
    assert sorted(q.details["quantized"]) == ["W1", "Wc", "Wd"]
    assert sorted(q.details["calibrated"]) == ["W1", "Wc"]  # not the depthwise Conv
    assert cal.notes[0].startswith("GPTQ rounding for 2 of 3 weights, from 64 calibration samples")
    assert "Conv" in q.details["not_calibrated"]["Wd"]
    assert plain.pass_report("quantize").details["calibrated"] == []
    # same integers and scales; plain also stores the lean lowering's input scales (one float per
    # input row) and their Mul nodes, which calibration leaves out (GPTQ rounds the weight as it is)
    assert cal.bytes_after <= plain.bytes_after <= 1.1 * cal.bytes_after
    err_plain = _output_errors(model, tmp_path / "plain.onnx", held_out)
    err_cal = _output_errors(model, tmp_path / "cal.onnx", held_out)
    assert err_cal[0] < 0.8 * err_plain[0], (err_cal, err_plain)  # c: every weight on its path calibrated
    assert cal.verification["rel_l2_error"] == pytest.approx(max(err_cal), rel=1e-3)  # held-out samples


def test_a_plans_gptq_records_are_calibrated(tmp_path):
    """A plan's `gptq` records are rounded with GPTQ on --calibration's inputs, as in the
    planner's own run (plan_check.check_plan has them measured): a --plan file from --dry-run
    --json, and so the budget's plan, which the run applies the same way."""
    model = _calibration_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    calibration = _samples(range(64))
    plan = onnxsurgery.quant_plan(src, min_elements=2000, calibration=calibration)
    assert sorted(w.name for w in plan.weights if w.rounding == "gptq") == ["W1", "Wc"]
    applied = onnxsurgery.quant_file(src, tmp_path / "p.onnx", plan=plan.to_dict(), calibration=calibration,
                                     verify=False)
    assert sorted(applied.pass_report("quantize").details["calibrated"]) == ["W1", "Wc"]


def test_hessians_are_the_same_when_captured_in_small_chunks(tmp_path):
    model = _calibration_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    graph = gs.import_onnx(model)
    sites = [s for s in collect_constants(graph) if s.name in ("A", "W1", "Wc", "Wd")]
    whole = Calibration(src, _samples(range(4)))
    chunked = Calibration(src, _samples(range(4)), memory_budget=1)  # one weight per run of the samples
    for c in (whole, chunked):
        c.plan(sites)
    for site in sites:
        m, m2 = whole.moments(site), chunked.moments(site)
        if site.name == "Wd":
            assert m is None and m2 is None
            continue
        h, h2 = m.total, m2.total
        np.testing.assert_allclose(h, h2, rtol=1e-6, atol=1e-9 * np.abs(h).max())
        assert h.shape == ((16, 16) if site.name == "A" else (96, 96))
    # W1 is read twice (merged, shared): its H sums both readers' inputs
    x = _samples(range(4))
    acts = [np.maximum(f["x"] @ numpy_helper.to_array(model.graph.initializer[0]), 0).astype(np.float64) for f in x]
    w1 = numpy_helper.to_array(model.graph.initializer[1])
    expected = sum(a.T @ a + (a @ w1).T @ (a @ w1) for a in acts)
    np.testing.assert_allclose(whole.moments(next(s for s in sites if s.name == "W1")).total, expected, rtol=1e-4,
                               atol=1e-5 * np.abs(expected).max())


def test_cli_calibration(tmp_path):
    from click.testing import CliRunner

    from onnxsurgery.cli import main

    model = _calibration_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    np.savez(tmp_path / "cal.npz", **{f"x__{i}": s["x"] for i, s in enumerate(_samples(range(4)))})
    result = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q.onnx"), "--min-elements", "2000",
                                       "--calibration", str(tmp_path / "cal.npz")])
    assert result.exit_code == 0, result.output
    assert re.search(r"GPTQ rounding for [12] of 3 weights, from 4 calibration samples", result.output)
    bad = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q2.onnx"),
                                    "--calibration", str(tmp_path / "missing.npz")])
    assert bad.exit_code != 0 and "missing.npz" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "q2.onnx").exists()
    np.savez(tmp_path / "wrong.npz", x=np.zeros((3, 5), np.float32))  # not the model's input shape
    wrong = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q3.onnx"),
                                      "--calibration", str(tmp_path / "wrong.npz")])
    assert wrong.exit_code == 2 and "calibration sample" in wrong.output and len(wrong.output.strip().splitlines()) == 1
    assert not (tmp_path / "q3.onnx").exists()



def test_inverse_cholesky_is_the_upper_factor_of_the_damped_inverse():
    from onnxsurgery.quantization.gptq import DAMPING, inverse_cholesky

    x = _correlated_inputs(300, 520, 7)  # rank 16 of 520; more than 256 columns: factored by halves, twice
    h = x.T @ x
    h[5, :] = h[:, 5] = 0  # a column no input reached
    u = inverse_cholesky(h)
    expected = h.copy()
    expected[5, 5] = 1
    expected += DAMPING * np.mean(np.diag(expected)) * np.eye(520)
    assert np.array_equal(u, np.triu(u))
    np.testing.assert_allclose(u.T @ u, np.linalg.inv(expected), rtol=1e-8, atol=1e-10 * np.abs(u).max() ** 2)


def test_weights_reading_the_same_input_share_one_capture(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", n], [n.lower()]) for n in ("Q", "K", "V")]
    inits = [numpy_helper.from_array(builders.rand((16, n), i), name) for i, (name, n) in enumerate(
        [("Q", 8), ("K", 8), ("V", 4)])]  # V narrower: its output axis does not matter
    model = builders.model(nodes, [builders.vi("x", shape=[32, 16])],
                           [builders.vi(n, shape=[32, "n"]) for n in ("q", "k", "v")], inits)
    src = tmp_path / "qkv.onnx"
    onnx.save(model, str(src))
    sites = [s for s in collect_constants(gs.import_onnx(model)) if s.name in ("Q", "K", "V")]
    c = Calibration(src, _samples(range(3)))
    c.plan(sites)
    q, k, v = (c.moments(s) for s in sites)
    assert q is k is v
    x = np.concatenate([s["x"] for s in _samples(range(3))]).astype(np.float64)
    np.testing.assert_allclose(q.total, x.T @ x, rtol=1e-5)
    evens = np.concatenate([s["x"] for s in _samples([0, 2])]).astype(np.float64)
    np.testing.assert_allclose(q.folds[0], evens.T @ evens, rtol=1e-5)


def test_calibration_of_a_model_with_external_data(tmp_path):
    # the probe session is built from a copy of the file elsewhere: its external data must still be found
    from onnx.external_data_helper import convert_model_to_external_data

    model = _calibration_model()
    convert_model_to_external_data(model, location="in.data")  # tensors of 1 KB or more
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    assert (tmp_path / "in.data").stat().st_size > src.stat().st_size
    cal = onnxsurgery.quant_file(src, tmp_path / "cal.onnx", min_elements=2000, samples=_samples(range(100, 102)),
                                 calibration=_samples(range(64)))
    assert sorted(cal.pass_report("quantize").details["calibrated"]) == ["W1", "Wc"]
    assert cal.verification["rel_l2_error"] < 0.05


def test_a_weight_whose_statistics_would_dwarf_it_is_not_calibrated(tmp_path):
    """H is K x K whatever the weight's size: a Gemm after a flattened feature map (issue 59: K =
    65536, 64 GiB) ran out of memory. Here K = 6000 (550 MiB of H for a 94 KB weight): skipped,
    with the reason, nothing allocated; the quantization still runs and is verified."""
    k = 6000
    nodes = [helper.make_node("Gemm", ["x", "W"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, k])], [builders.vi("y", shape=[1, 4])],
                           [numpy_helper.from_array(builders.rand((k, 4), 1) * 0.05, "W")])
    src = tmp_path / "wide.onnx"
    onnx.save(model, str(src))
    samples = [{"x": np.random.default_rng(s).standard_normal((1, k)).astype(np.float32)} for s in range(4)]
    calibration = Calibration(src, samples)
    site = next(s for s in collect_constants(gs.import_onnx(model)) if s.name == "W")
    calibration.plan([site])
    assert "statistics" in calibration.skipped["W"] and calibration.moments(site) is None
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", calibration=samples, samples=samples, min_elements=1000)
    assert "W" in report.pass_report("quantize").details["not_calibrated"]
    assert report.verification["rel_l2_error"] < 0.05


@pytest.mark.parametrize("op", ["Conv", "MatMul"])
def test_rows_sampled_from_a_large_activation_estimate_h(op):
    """Past ROWS_PER_COLUMN x K rows, H is measured on a fixed subset of the rows and scaled back
    to their count: about the full H (the choices and GPTQ's factor read its shape, not its
    noise), at a fraction of the reading; the same subset every run."""
    from onnxsurgery.quantization.input_rows import sampled_columns

    rng = np.random.default_rng(0)
    if op == "Conv":
        x, shape, attrs = rng.standard_normal((2, 8, 96, 96)).astype(np.float32) + 0.5, (16, 8, 3, 3), {"pads": [1] * 4}
    else:
        x, shape, attrs = rng.standard_normal((3, 4000, 24)).astype(np.float32) + 0.5, (24, 16), {}
    reader = Reader("x", op, attrs)
    full = sum(c.T.astype(np.float64) @ c for c in input_columns(x, reader, shape))
    scale, parts = sampled_columns(x, reader, shape, max_rows=3000)
    parts = list(parts)
    read = sum(len(c) for c in parts)
    assert scale > 3 and read <= 3000 + x.shape[0]
    estimate = scale * sum(c.T.astype(np.float64) @ c for c in parts)
    assert np.linalg.norm(estimate - full) / np.linalg.norm(full) < 0.1
    again = list(sampled_columns(x, reader, shape, max_rows=3000)[1])
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert sampled_columns(x, reader, shape, max_rows=10 ** 7)[0] == 1.0  # under the cap: every row


def test_choices_keep_the_rows_of_a_wide_weight_and_measure_the_same_output_error(tmp_path):
    """The measured choices read CHOICE_ROWS rows per weight; where those are fewer than the
    weight's input columns, H is kept as its rows (RowSample) and never formed: the output
    errors it gives are those of H = X^T X over the same rows."""
    from onnxsurgery.quantization.gptq import RowSample, input_energy, output_energy

    k, n = 600, 8
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    m = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[4, k])],
                       [builders.vi("y", shape=[4, n])], [numpy_helper.from_array(w, "W")])
    src = tmp_path / "wide.onnx"
    onnx.save(m, str(src))
    samples = [{"x": rng.standard_normal((4, k)).astype(np.float32)} for _ in range(5)]  # 20 rows < 600 columns
    site = next(s for s in collect_constants(gs.import_onnx(m)) if s.name == "W")
    choices = Calibration.for_choices(src, samples)
    choices.plan([site])
    kept = choices.moments(site).total
    assert isinstance(kept, RowSample) and kept.rows.shape == (20, k)
    x = np.concatenate([s["x"] for s in samples]).astype(np.float64)
    h = x.T @ x
    d = rng.standard_normal((k, n)).astype(np.float32)
    expected = output_energy(d, h, channel_axis=1, block_axis=0)
    assert output_energy(d, kept, channel_axis=1, block_axis=0) == pytest.approx(expected, rel=1e-4)
    np.testing.assert_allclose(input_energy(kept, (k, 1), channel_axis=1, block_axis=0),
                               input_energy(h, (k, 1), channel_axis=1, block_axis=0), rtol=1e-4)
    # GPTQ's calibration (rows per column x K) forms H from the same samples
    gptq = Calibration(src, samples)
    gptq.plan([site])
    np.testing.assert_allclose(gptq.moments(site).total, h, rtol=1e-4, atol=1e-6 * np.abs(h).max())


def test_verification_takes_the_captures_outputs_as_its_reference(tmp_path):
    """quant --inputs: the measured choices ran the original model on every sample, asking for
    its outputs too; verification compares the result with those instead of running the
    original again, and its figures are the ones a fresh reference run gives."""
    from onnxsurgery.running.verify import compare_models

    model = _calibration_model()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    samples = _samples(range(3))
    quantized = tmp_path / "q.onnx"
    onnxsurgery.quant_file(src, quantized, min_elements=1000, verify=False)
    choices = Calibration.for_choices(src, samples)
    sites = [s for s in collect_constants(gs.import_onnx(model)) if s.name in ("W1", "Wc")]
    choices.plan(sites)
    choices.moments(sites[0])
    names, outputs = choices.reference_outputs(samples)
    assert names == ["c", "d"] and len(outputs) == 3
    for got, feeds in zip(outputs, samples):
        for a, b in zip(got, run(model, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert choices.reference_outputs(_samples(range(3))) is None  # not these samples: not their outputs
    fresh = compare_models(src, quantized, samples=samples, fold_candidate=False)
    shared = compare_models(src, quantized, samples=samples, fold_candidate=False,
                            reference_outputs=(names, outputs))
    assert shared["rel_l2_error"] == pytest.approx(fresh["rel_l2_error"], rel=1e-4)
    assert shared["samples"] == fresh["samples"] == 3
