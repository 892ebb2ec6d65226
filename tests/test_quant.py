"""quant: weight-only quantization, checked on the saved file in onnxruntime."""

import numpy as np
import onnx
import pytest
from conftest import builders, run

from onnxsurgery.storage.protos import graphs_everywhere
import onnxsurgery
from onnxsurgery.storage.protos import all_tensor_protos
from onnxsurgery.errors import UnsupportedModelError, VerificationError
from onnxsurgery.quantization.options import QuantOptions
from onnxsurgery.quantization.packing import pack_halves, pack_nibbles
from onnxsurgery.quantization.rounding import dequantize, quantize

# -- the arithmetic, against a plain numpy reference ----------------------------------------


def reference_symmetric_int8_per_channel(x, axis):
    amax = np.abs(np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)).max(axis=1)
    scale = np.where(amax > 0, amax / 127, 1.0).astype(np.float32)
    view = [1] * x.ndim
    view[axis] = -1
    q = np.clip(np.round(x / scale.reshape(view)), -128, 127)  # float32, as stored
    return q.astype(np.int8), scale


@pytest.mark.parametrize("axis", [0, 1])
def test_int8_per_channel_matches_reference(axis):
    x = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32)
    x[3 if axis == 0 else slice(None), 3 if axis == 1 else slice(None)] = 0.0  # an all-zero channel
    qt = quantize(x, dtype="int8", granularity="channel", axis=axis, symmetric=True)
    q_ref, s_ref = reference_symmetric_int8_per_channel(x, axis)
    assert np.array_equal(qt.q, q_ref)
    assert np.allclose(qt.scale, s_ref)
    assert qt.zero_point is None
    assert np.isfinite(dequantize(qt)).all()
    # round to nearest: error at most half a step per element
    step = np.expand_dims(qt.scale, 1 - axis)
    assert (np.abs(dequantize(qt) - x) <= step / 2 + 1e-7).all()


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4", "uint4"])
@pytest.mark.parametrize("granularity", ["tensor", "channel", "block"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("half_scales", [False, True])
def test_round_trip_error_bounded_and_no_nan(dtype, granularity, symmetric, half_scales):
    x = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    x[:, 5] = 0.0     # all-zero channel (axis 1)
    x[:, 7] = 0.5     # constant channel
    qt = quantize(x, dtype=dtype, granularity=granularity, axis=1 if granularity != "block" else 0,
                  block_size=16, symmetric=symmetric, half_scales=half_scales)
    assert qt.scale.dtype == (np.float16 if half_scales else np.float32)
    y = dequantize(qt)
    assert np.isfinite(y).all() and np.isfinite(qt.scale).all() and (qt.scale > 0).all()
    levels = {"int8": 255, "uint8": 255, "int4": 15, "uint4": 15}[dtype]
    rng = x.max() - x.min()
    assert np.abs(y - x).max() <= rng / levels + 1e-6  # never worse than one step of the widest range
    assert np.array_equal(y[:, 5], np.zeros(64, np.float32))  # zero exactly representable
    if granularity == "channel":  # exact, or within a float16 scale's rounding (2^-11 relative)
        assert np.allclose(y[:, 7], 0.5, atol=0.5 * 2.0 ** -10 if half_scales else 1e-6)


def _group_error_sums(qt, x):
    """Per group: sum of (dequantized - x), in steps of that group's scale."""
    d = dequantize(qt).astype(np.float64) - x
    scale = qt.scale.astype(np.float64)
    if qt.granularity == "channel":
        return np.moveaxis(d, qt.axis, 0).reshape(x.shape[qt.axis], -1).sum(axis=1) / scale
    blocked = list(x.shape)
    blocked[qt.axis:qt.axis + 1] = [x.shape[qt.axis] // qt.block_size, qt.block_size]
    return d.reshape(blocked).sum(axis=qt.axis + 1) / scale


@pytest.mark.parametrize("dtype", ["int8", "uint4"])
@pytest.mark.parametrize("granularity, axis", [("channel", 0), ("channel", 1), ("block", 1)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_balanced_rounding_zeroes_each_groups_error_sum(dtype, granularity, axis, symmetric):
    x = (np.random.default_rng(2).standard_normal((24, 64, 3)) + 0.3).astype(np.float32)
    x[5] = 0.0  # an all-zero slice: no NaN, stays zero
    kw = dict(dtype=dtype, granularity=granularity, axis=axis, block_size=16, symmetric=symmetric,
              half_scales=True)
    nearest, balanced = quantize(x, **kw), quantize(x, balanced=True, **kw)
    assert np.array_equal(nearest.scale, balanced.scale)
    # nearest leaves error sums of several steps; balanced at most half a step per group
    assert np.abs(_group_error_sums(nearest, x)).max() > 2
    assert np.abs(_group_error_sums(balanced, x)).max() <= 0.5 + 1e-4
    # each value moves at most one step from nearest, so its error stays under one step
    assert np.abs(balanced.q.astype(np.int16) - nearest.q).max() == 1
    y = dequantize(balanced)
    assert np.isfinite(y).all() and np.array_equal(y[5], np.zeros_like(y[5]))
    lo, hi = (0, 15) if dtype == "uint4" else (-128, 127)
    assert balanced.q.min() >= lo and balanced.q.max() <= hi
    # the price: a slightly larger element-wise error
    e_near = np.linalg.norm(dequantize(nearest) - x)
    assert e_near <= np.linalg.norm(y - x) <= 1.05 * e_near


@pytest.mark.parametrize("granularity, axis", [("block", 1), ("block", 0), ("channel", 0)])
def test_clip_search_never_raises_a_groups_error_and_narrows_ranges_set_by_tails(granularity, axis):
    """Ratio 1.0 is among those tried, so no group's squared error can rise. On Gaussian
    weights, whose ranges the tails set, ranges narrow and the total error falls (measured:
    by 20-27%), while a lone outlier far beyond the rest of its block (12 sigma) is kept."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    x[0, 0] = 12.0
    args = dict(dtype="int4", granularity=granularity, axis=axis, block_size=32, symmetric=True)
    plain, searched = quantize(x, **args), quantize(x, search_clip=True, **args)

    def group_errors(qt):
        sq = (dequantize(qt) - x) ** 2
        if granularity == "channel":
            return sq.sum(axis=1 - axis)
        return np.moveaxis(sq, axis, 0).reshape(x.shape[axis] // 32, 32, -1).sum(axis=1)

    assert (group_errors(searched) <= group_errors(plain) * (1 + 1e-6)).all()
    assert group_errors(searched).sum() < 0.85 * group_errors(plain).sum()
    assert (searched.scale < plain.scale).mean() > 0.5
    if granularity == "block":  # in a row of 128 the trade favours clipping it (to 9.6)
        assert dequantize(searched)[0, 0] == pytest.approx(12.0, rel=0.05)
    assert searched.q.min() >= -8 and searched.q.max() <= 7


def test_pack_nibbles_matches_onnx_int4_storage():
    values = np.array([-8, -1, 0, 7, 3], np.int8)
    t = onnx.helper.make_tensor("t", onnx.TensorProto.INT4, [5], pack_nibbles(values, signed=True).tobytes(),
                                raw=True)
    assert np.array_equal(onnx.numpy_helper.to_array(t).astype(np.int8), values)  # onnx reads it back
    packed = pack_nibbles(values, signed=True)
    lo = (packed & 0x0F).astype(np.int16)
    hi = (packed >> 4).astype(np.int16)
    unpacked = np.stack([lo, hi], 1).ravel()[:5]
    unpacked = np.where(unpacked >= 8, unpacked - 16, unpacked)
    assert np.array_equal(unpacked, values)


# -- the pass, on saved files ------------------------------------------------------------------

SCHEMES = [
    dict(),  # the defaults: int8, asymmetric, blocks of 32
    dict(dtype="int8", granularity="channel", symmetric=True),
    dict(dtype="int8", granularity="tensor", symmetric=True),
    dict(dtype="uint8", granularity="channel", symmetric=False),
    dict(dtype="int4", granularity="block", block_size=16, symmetric=True),
    dict(dtype="uint4", granularity="block", block_size=32, symmetric=False),
    dict(dtype="int4"),  # asymmetric blocks of 32
    dict(dtype="int8", granularity="block", block_size=32, symmetric=True),
]


def _quant(tmp_path, model, **options):
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "q.onnx"
    options = options if options.get("dynamic") else {"min_elements": 1024, **options}  # --dynamic takes none
    report = onnxsurgery.quant_file(src, out, **options)
    onnx.checker.check_model(onnx.load(str(out)))
    return src, out, report


def _rel_l2(model, out, seeds=(0, 1)):
    worst = 0.0
    for seed in seeds:
        f = builders.feeds_for(model, seed)
        f["ids"] = np.array([3, 77], np.int64) if "ids" in f else None
        f = {k: v for k, v in f.items() if v is not None}
        for a, b in zip(run(model, f), run(out, f)):
            a, b = a.astype(np.float64), b.astype(np.float64)
            worst = max(worst, np.linalg.norm(a - b) / np.linalg.norm(a))
    return worst


@pytest.mark.parametrize("lowering", ["arith", "dq"])
@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: "-".join(str(v) for v in s.values()) or "defaults")
def test_every_scheme_and_lowering_loads_and_stays_close(tmp_path, scheme, lowering):
    model = builders.quant_cases(opset=21, ir=10)
    src, out, report = _quant(tmp_path, model, lowering=lowering, **scheme)
    q = report.pass_report("quantize")
    # E, W_mm (shared, merged once), W_const and W_if; `small` stays float
    assert q.changed == 4
    assert not any(t.name == "small" and t.data_type != onnx.TensorProto.FLOAT
                   for t in onnx.load(str(out)).graph.initializer)
    opts = QuantOptions(**scheme)
    four_bit = opts.four_bit
    bound = 0.15 if four_bit else 0.02
    assert report.verification["rel_l2_error"] < bound
    assert _rel_l2(model, out) < bound
    # size: the quantized payload is what the scheme implies (q bytes + scales + zero points),
    # and the whole file, graph overhead of this tiny model included, shrinks accordingly
    saved = onnx.load(str(out))
    payload = sum(len(t.raw_data) for t in all_tensor_protos(saved.graph))
    n = 128 * 64 + 3 * 64 * 64
    groups = {"tensor": 4, "channel": 128 + 3 * 64, "block": n // opts.block_size}[opts.granularity]
    scale_bytes = 2 if lowering == "arith" else 4  # float16 scales under arith
    expected = n // (2 if four_bit else 1) + groups * (scale_bytes + (not opts.symmetric)) + 64 * 4
    assert payload <= expected + 4 * 100, (payload, expected)  # + shape constants per weight
    assert report.bytes_after / report.bytes_before < (0.30 if four_bit else 0.36)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert ("DequantizeLinear" in ops) == (lowering == "dq")
    if lowering == "arith":
        # onnxruntime holds each float intermediate of a folded chain until folding ends: no
        # float Reshape straight after the Cast (blocks are stored blocked)
        graph = onnx.load(str(out)).graph
        float_casts = {n.output[0] for n in graph.node
                       if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.FLOAT}
        assert float_casts and not any(n.op_type == "Reshape" and n.input[0] in float_casts for n in graph.node)


def test_weights_in_if_branch_and_constant_nodes_are_quantized(tmp_path):
    model = builders.quant_cases()
    _, out, report = _quant(tmp_path, model)
    names = {e["name"] for e in report.pass_report("quantize").details["largest_errors"]}
    assert {"W_if", "W_const", "W_mm", "E"} <= names
    saved = onnx.load(str(out))
    branch = next(a.g for n in saved.graph.node if n.op_type == "If" for a in n.attribute if a.name == "then_branch")
    assert all(t.data_type != onnx.TensorProto.FLOAT or t.dims == [] or np.prod(t.dims) < 1024
               for t in branch.initializer)


def test_fp16_weights_keep_their_dtype(tmp_path):
    model = builders.quant_cases(weight_dtype=np.float16)
    _, out, report = _quant(tmp_path, model, dtype="int8")
    assert report.pass_report("quantize").changed == 4
    assert report.verification["rel_l2_error"] < 0.02
    assert onnx.load(str(out)).graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_int4_on_opset_11_uses_valid_lowering(tmp_path):
    model = builders.quant_cases(opset=11, ir=6)
    _, out, report = _quant(tmp_path, model, dtype="int4", granularity="block", block_size=16, lowering="arith")
    saved = onnx.load(str(out))
    assert saved.opset_import[0].version == 11 and saved.ir_version == 6
    assert all(t.data_type != onnx.TensorProto.INT4 for t in saved.graph.initializer)
    assert report.verification["rel_l2_error"] < 0.15
    assert report.bytes_after / report.bytes_before < 0.30


def test_pack_halves_puts_the_second_half_in_the_high_nibbles():
    values = np.arange(16, dtype=np.uint8)[::-1].repeat(3)[:40]
    packed = pack_halves(values)
    assert packed.dtype == np.uint8 and packed.size == 20
    assert np.array_equal(np.concatenate([packed & 0x0F, packed >> 4]), values)
    with pytest.raises(ValueError):
        pack_halves(values[:5])


@pytest.mark.parametrize("granularity", ["channel", "block"])
def test_int4_arith_unpacks_alike_at_every_opset(tmp_path, granularity):
    """4-bit values unpack through uint8 BitShift from opset 11 and through int32 before; an odd
    element count (65 x 65) stores the last value on its own. Both must decode the same
    integers, in place: y = I @ W gives the dequantized weight itself."""
    w = builders.rand((65, 65), 5) * 0.1
    outputs, ops = {}, {}
    for opset, ir in ((10, 5), (11, 6), (13, 7)):
        model = builders.model([onnx.helper.make_node("MatMul", ["x", "W"], ["y"])],
                               [builders.vi("x", shape=[65, 65])], [builders.vi("y", shape=[65, 65])],
                               [onnx.numpy_helper.from_array(w, "W")], opset=opset, ir=ir)
        blocks = {"block_size": 16} if granularity == "block" else {}  # a block size with channels is refused
        _, out, report = _quant(tmp_path, model, dtype="int4", granularity=granularity, **blocks,
                                lowering="arith", symmetric=False)  # no clipping search: within half a step
        assert report.pass_report("quantize").changed == 1
        ops[opset] = {n.op_type for n in onnx.load(str(out)).graph.node}
        outputs[opset] = run(out, {"x": np.eye(65, dtype=np.float32)})[0]
    assert "BitShift" in ops[11] and "Div" not in ops[11] and "Cast" in ops[11]
    assert "Div" in ops[10] and "BitShift" not in ops[10]
    assert np.array_equal(outputs[10], outputs[11]) and np.array_equal(outputs[11], outputs[13])
    # Within half a step of the weight; a value decoded out of place would be off by several.
    widest_step = 2 * np.abs(w).max(axis=0) / 15  # per column, no group's step is wider
    assert np.all(np.abs(outputs[11] - w) <= 0.51 * widest_step)
    assert np.abs(outputs[11] - w).max() > 0  # it was quantized


def test_dq_upgrades_the_opset_and_verifies_it(tmp_path):
    """Blockwise 4-bit DequantizeLinear needs opset 21: the model is upgraded, not refused."""
    model = builders.quant_cases(opset=13)
    _, out, report = _quant(tmp_path, model, dtype="int4", granularity="block", lowering="dq")
    saved = onnx.load(str(out))
    assert saved.opset_import[0].version == 21 and saved.ir_version >= 10
    assert any("upgraded opset 13 -> 21" in n and "verified" in n for n in report.notes)
    assert any(t.data_type == onnx.TensorProto.INT4 for t in saved.graph.initializer)
    assert report.verification["rel_l2_error"] < 0.15


def test_upgrade_clears_an_output_shape_the_new_opset_contradicts(tmp_path):
    """ddddocr declares a [1, seqlen] output that is [T, 1, 8210]: onnxruntime merges it
    leniently, onnxruntime-web refuses it at opset 21. The upgrade declares the inferred shape
    for that output only."""
    from onnx import helper

    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Reshape", ["h", "shape"], ["y"]),
             helper.make_node("Identity", ["h"], ["z"])]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64])],
                           [builders.vi("y", shape=[2, 64]), builders.vi("z", shape=[2, 64])],
                           [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W"),
                            onnx.numpy_helper.from_array(np.array([2, 8, 8], np.int64), "shape")], opset=13)
    _, out, report = _quant(tmp_path, model, keep_quantized=True)
    saved = onnx.load(str(out))
    onnx.shape_inference.infer_shapes(saved, strict_mode=True)  # raises on the contradiction
    shapes = {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in saved.graph.output}
    assert shapes == {"y": [2, 8, 8], "z": [2, 64]}
    assert report.verification["rel_l2_error"] < 0.02


def test_upgrade_that_fails_names_the_op(tmp_path):
    """An op the version converter cannot carry to opset 21 is named in a one-line refusal
    (ImageScaler, an experimental op of old exporters, has no schema it could map)."""
    from onnx import helper

    nodes = [helper.make_node("ImageScaler", ["x"], ["s"], scale=2.0),
             helper.make_node("MatMul", ["s", "W"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 3, 64, 64])], [builders.vi("y", shape=[1, 3, 64, 64])],
                           [onnx.numpy_helper.from_array(builders.rand((64, 64), 1), "W")], opset=10, ir=5)
    with pytest.raises(UnsupportedModelError, match=r"opset 10 to 21.*cannot carry: ImageScaler\)$"):
        _quant(tmp_path, model, keep_quantized=True)
    assert not (tmp_path / "q.onnx").exists()


def test_conv_per_output_channel_with_zero_and_constant_channels(tmp_path):
    model = builders.conv_model()
    _, out, report = _quant(tmp_path, model)
    q = report.pass_report("quantize")
    assert q.details["largest_errors"][0]["name"] == "Wc"
    assert report.verification["rel_l2_error"] < 0.02
    f = builders.feeds_for(model)
    y_ref, y = run(model, f)[0], run(out, f)[0]
    assert np.isfinite(y).all()
    assert np.allclose(y[0, 3], y_ref[0, 3], atol=1e-6)  # the all-zero channel stays zero


def test_blocks_fit_the_axis_or_fall_back_to_channels(tmp_path):
    # K = 200 is no multiple of 32: blocks of 25 (its largest divisor in 16..32) instead
    w = (np.random.default_rng(0).standard_normal((200, 32)) * 0.05).astype(np.float32)
    mm = builders.model([onnx.helper.make_node("MatMul", ["x", "W"], ["y"])],
                        [builders.vi("x", shape=[2, 200])], [builders.vi("y", shape=[2, 32])],
                        [onnx.numpy_helper.from_array(w, "W")])
    _, out, report = _quant(tmp_path, mm, granularity="block")
    q = report.pass_report("quantize")
    assert q.details["schemes"] == {"int8/block25/asym/arith": 1}
    assert report.verification["rel_l2_error"] < 0.01
    scale = next(t for t in onnx.load(str(out)).graph.initializer if t.name.startswith("W_scale"))
    assert list(scale.dims) == [8, 1, 32]  # 200 / 25 blocks per column
    # 8 input channels: no block size in 16..32 divides it, so one scale per output channel
    _, _, report = _quant(tmp_path, builders.conv_model(), granularity="block")
    q = report.pass_report("quantize")
    assert q.details["per_channel_instead_of_blocks"] == ["Wc"]
    assert q.details["schemes"] == {"int8/channel/asym/arith": 1}


def test_conv_weights_get_balanced_rounding_and_a_smaller_output_error(tmp_path):
    # A 1x1 conv over sigmoid outputs (all positive: a common offset), and a MatMul beside it.
    rng = np.random.default_rng(3)
    wc = (rng.standard_normal((64, 128, 1, 1)) * 0.1).astype(np.float32)
    wm = (rng.standard_normal((8, 160)) * 0.1).astype(np.float32)
    nodes = [onnx.helper.make_node("Sigmoid", ["x"], ["s"]),
             onnx.helper.make_node("Conv", ["s", "Wc"], ["c"]),
             onnx.helper.make_node("MatMul", ["x", "Wm"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[1, 128, 4, 8])],
                           [builders.vi("c", shape=[1, 64, 4, 8]), builders.vi("y", shape=[1, 128, 4, 160])],
                           [onnx.numpy_helper.from_array(wc, "Wc"), onnx.numpy_helper.from_array(wm, "Wm")])
    feeds = builders.feeds_for(model)
    conv_ref = run(model, feeds)[0]
    errors = {}
    for rounding in ("nearest", "auto"):
        _, out, report = _quant(tmp_path, model, rounding=rounding)
        q = report.pass_report("quantize")
        assert sorted(q.details["quantized"]) == ["Wc", "Wm"]
        assert q.details["balanced_rounding"] == ([] if rounding == "nearest" else ["Wc"])  # not the MatMul's
        errors[rounding] = np.linalg.norm(run(out, feeds)[0] - conv_ref) / np.linalg.norm(conv_ref)
    assert errors["auto"] < 0.8 * errors["nearest"]


def test_max_error_refuses_and_writes_nothing(tmp_path):
    model = builders.quant_cases()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    with pytest.raises(VerificationError, match="exceeds --max-error"):
        onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024, dtype="int4",
                               granularity="tensor", max_error=1e-6)
    assert not (tmp_path / "q.onnx").exists()


def test_verification_sessions_one_at_a_time_without_the_graph(tmp_path, monkeypatch):
    """Verification's memory: the reference and candidate sessions never coexist, and the
    quantized graph is released before the candidate's session is created (the reference's
    runs while the model is quantized, on another thread: running/ahead.py)."""
    import threading
    import weakref

    from onnxsurgery.running import runs as seam, sessions as sessions_module
    from onnxsurgery.api import quantizing as api

    src = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(src))
    graphs, sessions, created = [], weakref.WeakSet(), []
    real_open, real_session = api.open_workspace, seam.session

    def open_and_track(source):
        ws = real_open(source)
        graphs.append(weakref.ref(ws.graph))
        return ws

    def session_and_track(model, **kw):
        assert not sessions, "another onnxruntime session is still alive"
        if "extra_outputs" in kw:  # the lean/accurate choice reads the layers' inputs, weights mapped
            assert kw.get("map_weights") is True
            s = real_session(model, **kw)
            sessions.add(s)
            return s
        if threading.current_thread() is threading.main_thread():
            assert graphs and all(g() is None for g in graphs), "the graph is still in memory"
        s = real_session(model, **kw)
        sessions.add(s)
        created.append((str(model), kw))
        return s

    monkeypatch.setattr(api, "open_workspace", open_and_track)
    monkeypatch.setattr(seam, "session", session_and_track)  # compare_models' sessions
    monkeypatch.setattr(sessions_module, "session", session_and_track)  # the lean/accurate choice's probes
    report = onnxsurgery.quant_file(src, tmp_path / "q.onnx", min_elements=1024)
    # the input's weights mapped from its file; the result loaded without constant folding
    assert len(created) == 2 and created[0][0] == str(src)
    assert created[0][1].get("map_weights") is True and created[1][1].get("fold_constants") is False
    assert report.verification["rel_l2_error"] < 0.05
    assert (tmp_path / "q.onnx").exists()


def test_include_exclude(tmp_path):
    model = builders.quant_cases()
    _, _, report = _quant(tmp_path, model, exclude=("Gather",))
    q = report.pass_report("quantize")
    assert q.changed == 3 and any(s.name == "E" and "--exclude" in s.reason for s in q.skipped)
    _, _, report = _quant(tmp_path, model, include=("W_*",))
    assert report.pass_report("quantize").changed == 3


def test_cli_quant_and_compare(tmp_path, save):
    from click.testing import CliRunner

    from onnxsurgery.cli import main

    src = save(builders.quant_cases())
    r = CliRunner().invoke(main, ["quant", str(src), str(tmp_path / "q.onnx"), "--min-elements", "1024"])
    assert r.exit_code == 0, r.output
    assert "quantized 4 weights" in r.output and "relative L2" in r.output
    r = CliRunner().invoke(main, ["compare", str(src), str(tmp_path / "q.onnx"), "--json"])
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.output)["outputs"]["y"]["rel_l2_error"] < 0.02


def test_dynamic_wraps_quantize_dynamic_even_with_constant_node_weights(tmp_path):
    from onnx import helper

    w = (builders.rand((64, 64), 40) * 0.1).astype(np.float32)
    nodes = [builders.const_node("Wn", w), helper.make_node("MatMul", ["x", "Wn"], ["y"])]
    model = builders.model(nodes, [builders.vi("x", shape=[2, 64])], [builders.vi("y", shape=[2, 64])])
    _, out, report = _quant(tmp_path, model, dynamic=True)  # quantize_dynamic alone refuses this
    assert report.pass_report("constants_to_initializers").changed == 1
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(out)).graph.node}
    assert report.verification["rel_l2_error"] < 0.1


def test_dynamic_output_that_onnxruntime_refuses_is_not_written(tmp_path):
    """quantize_dynamic mis-wires subgraphs that read quantized outer values; verification
    catches it and nothing is written."""
    src = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(src))
    with pytest.raises(VerificationError, match="cannot load"):
        onnxsurgery.quant_file(src, tmp_path / "q.onnx", dynamic=True)
    assert not (tmp_path / "q.onnx").exists()


def test_fp16_storage_with_cast_back(tmp_path):
    model = builders.quant_cases()
    _, out, report = _quant(tmp_path, model, fp16=True)
    q = report.pass_report("quantize")
    assert q.changed == 4 and q.details["schemes"] == {"fp16/cast": 4}
    assert report.verification["rel_l2_error"] < 1e-3
    saved = onnx.load(str(out))
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in saved.graph.initializer)
    assert saved.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT


def test_levels_keep_size_and_compress_better(tmp_path):
    import gzip

    model = builders.quant_cases()
    src, out, report = _quant(tmp_path, model, levels=16)
    assert report.pass_report("quantize").changed == 4
    # same float storage, few distinct values per channel
    assert abs(out.stat().st_size - src.stat().st_size) < 2000
    saved = onnx.load(str(out))
    w = onnx.numpy_helper.to_array(next(t for t in saved.graph.initializer if t.name == "W_mm"))
    assert w.dtype == np.float32 and max(len(np.unique(w[:, j])) for j in range(w.shape[1])) <= 16
    assert len(gzip.compress(out.read_bytes())) < 0.6 * len(gzip.compress(src.read_bytes()))
    assert report.verification["rel_l2_error"] < 0.2


def test_narrow_on_a_large_tensor_read_lazily(tmp_path):
    """A narrowed tensor whose payload stayed in the input file must be written inline."""
    idx = (np.arange(5000, dtype=np.int64) * 7) % 64  # 40 KB: left in the file when opened
    from onnx import helper, numpy_helper

    nodes = [helper.make_node("Gather", ["x", "idx"], ["y"], axis=0)]
    model = builders.model(nodes, [builders.vi("x", shape=[64])], [builders.vi("y", shape=[5000])],
                           [numpy_helper.from_array(idx, "idx")])
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "o.onnx"
    report = onnxsurgery.shrink_file(src, out, narrow=True, verify=True)
    assert report.pass_report("narrow").changed == 1
    assert onnx.load(str(out)).graph.initializer[0].data_type == onnx.TensorProto.INT32


def _allocation_sources(tmp_path):
    src = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(src))
    runs = {dtype: onnxsurgery.quant_file(src, tmp_path / f"{dtype}.onnx", min_elements=1024, dtype=dtype)
            for dtype in ("int4", "int8")}
    return src, {d: (r.bytes_after, r.verification["rel_l2_error"]) for d, r in runs.items()}


def test_target_error_meets_the_error_smaller_than_all_int8(tmp_path):
    src, found = _allocation_sources(tmp_path)
    four, eight = found["int4"], found["int8"]
    assert eight[1] < four[1]
    target = (eight[1] + four[1]) / 2  # int4 everywhere misses it, int8 everywhere meets it
    report = onnxsurgery.quant_file(src, tmp_path / "t.onnx", min_elements=1024, target_error=target)
    assert report.verification["rel_l2_error"] <= target
    assert report.bytes_after < eight[0]  # some weights afforded 4 bits
    assert set(report.allocation.values()) == {"int4", "int8"}, report.allocation
    schemes = report.pass_report("quantize").details["schemes"]
    assert {s.split("/")[0] for s in schemes} == {"int4", "int8"}, schemes  # what the file holds
    assert any("--target-error" in n for n in report.notes)
    tight = onnxsurgery.quant_file(src, tmp_path / "u.onnx", min_elements=1024, target_error=eight[1] / 10)
    assert tight.verification["rel_l2_error"] <= eight[1] / 10  # float16 / float32 where int8 is too coarse
    assert {"float16", "float32"} & set(tight.allocation.values()), tight.allocation


def test_target_size_fits_the_file_at_less_error_than_all_int4(tmp_path):
    src, found = _allocation_sources(tmp_path)
    four, eight = found["int4"], found["int8"]
    budget = (four[0] + eight[0]) // 2
    report = onnxsurgery.quant_file(src, tmp_path / "s.onnx", min_elements=1024, target_size=budget)
    assert report.bytes_after <= budget
    assert report.verification["rel_l2_error"] < four[1]
    assert set(report.allocation.values()) == {"int4", "int8"}, report.allocation


def test_target_size_of_the_default_file_is_the_default(tmp_path):
    """The budget's int8 is the default's lean int8, not the block chain: asked for the default
    file's own size, it must do at least as well as the default."""
    src, found = _allocation_sources(tmp_path)
    size, error = found["int8"]
    report = onnxsurgery.quant_file(src, tmp_path / "s.onnx", min_elements=1024, target_size=size)
    assert report.bytes_after <= size
    assert report.verification["rel_l2_error"] <= error * 1.0001, (report.allocation, error)


def test_budget_plan_is_applied_as_plan_records(tmp_path):
    """The budget hands the run the plan its allocation makes (api/budget.py: no name patterns),
    applied as a --plan file's records are: the dry run shows those records, the file holds them
    record for record, and each weight is stored in the format it was allocated."""
    src, found = _allocation_sources(tmp_path)
    budget = (found["int4"][0] + found["int8"][0]) // 2
    planned = onnxsurgery.quant_plan(src, min_elements=1024, target_size=budget)
    report = onnxsurgery.quant_file(src, tmp_path / "s.onnx", min_elements=1024, target_size=budget)
    assert report.weights == planned.to_dict()["weights"]
    assert any("--target-size" in n for n in planned.notes) and "every weight as the plan says" not in planned.notes
    stored = {"int4": "int4", "float16": "float16", "float32": "float", "kept": "float"}
    records = {w["name"]: w["dtype"] for w in report.weights}
    assert {name: records[name] for name, fmt in report.allocation.items() if fmt in stored} == \
        {name: stored[fmt] for name, fmt in report.allocation.items() if fmt in stored}
    assert "int4" in report.allocation.values()


def test_budget_keeps_the_models_opset_where_the_converter_fails(tmp_path, monkeypatch):
    """Where onnx's converter cannot upgrade the model to the opset 4-bit weights need, the probes
    and the budget's plan stay at the model's opset (the arith chain), and the run, which applies
    the plan's records, writes that plan rather than refusing, with the note saying why."""
    from onnxsurgery.api import quant_steps

    src, found = _allocation_sources(tmp_path)
    opset = onnx.load(str(src)).opset_import[0].version

    def refuse(model, target):
        raise UnsupportedModelError(f"cannot convert to opset {target}")

    monkeypatch.setattr(quant_steps, "upgrade_opset", refuse)
    budget = (found["int4"][0] + found["int8"][0]) // 2
    report = onnxsurgery.quant_file(src, tmp_path / "s.onnx", min_elements=1024, target_size=budget)
    assert "int4" in report.allocation.values()
    assert onnx.load(str(tmp_path / "s.onnx")).opset_import[0].version == opset
    assert any(n.startswith("cannot convert to opset") and "kept opset" in n for n in report.notes), report.notes
    assert {w["lowering"] for w in report.weights if w["dtype"] == "int4"} <= {"arith", "gather"}  # no opset 21 form


def test_allocation_leaves_room_for_the_large_weight_step():
    """Greedy by rate alone would spend the room on b's cheap step and leave a at int4."""
    from onnxsurgery.quantization.choices import allocation

    weights = [allocation.WeightCosts("a", {"int4": 10, "int8": 20}, {"int4": 0.3, "int8": 0.01}),
               allocation.WeightCosts("b", {"int4": 1, "float16": 2}, {"int4": 0.2})]
    plan = allocation.for_size(weights, 21)
    assert plan.formats == {"a": "int8", "b": "int4"} and plan.bytes == 21
    assert allocation.for_error(weights, 0.25).formats == {"a": "int8", "b": "int4"}


def test_allocation_takes_the_most_error_per_byte_first():
    from onnxsurgery.quantization.choices import allocation

    weights = [allocation.WeightCosts("a", {"int4": 10, "int8": 20, "float32": 80}, {"int4": 0.3, "int8": 0.02}),
               allocation.WeightCosts("b", {"int4": 10, "int8": 20, "float32": 80}, {"int4": 0.1, "int8": 0.01})]
    assert allocation.for_size(weights, 30).formats == {"a": "int8", "b": "int4"}
    plan = allocation.for_error(weights, 0.05)
    assert plan.formats == {"a": "int8", "b": "int8"} and plan.bytes == 40
    assert plan.predicted_error == pytest.approx((0.02 ** 2 + 0.01 ** 2) ** 0.5)
    assert allocation.for_error(weights, 0.015).formats == {"a": "float32", "b": "int8"}
    assert allocation.for_size(weights, 5).formats == {"a": "int4", "b": "int4"}  # nothing fits: the smallest
    assert allocation.uniform(weights, "int8").bytes == 40


# -- embedding tables: gathered, then dequantized ---------------------------------------------


def _embedding_model(table_dtype=np.float32, also_matmul=False, opset=builders.OPSET):
    """A table E [300, 64] read by two Gathers (2-D indices, one of them negative); with
    `also_matmul`, E is also read by a MatMul and must not be gathered."""
    from onnx import TensorProto, helper, numpy_helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(table_dtype))
    e = (np.random.default_rng(40).standard_normal((300, 64)) * 0.1).astype(table_dtype)
    nodes = [helper.make_node("Gather", ["E", "ids"], ["a"], axis=0),
             helper.make_node("Gather", ["E", "ids2"], ["b"], axis=0)]
    inputs = [builders.vi("ids", TensorProto.INT64, [2, 3]), builders.vi("ids2", TensorProto.INT64, [2, 3])]
    outputs = [builders.vi("a", elem, [2, 3, 64]), builders.vi("b", elem, [2, 3, 64])]
    if also_matmul:
        nodes.append(helper.make_node("MatMul", ["x", "E"], ["z"]))
        inputs.append(builders.vi("x", elem, [1, 300]))
        outputs.append(builders.vi("z", elem, [1, 64]))
    return builders.model(nodes, inputs, outputs, [numpy_helper.from_array(e, "E")], opset=opset)


def _embedding_feeds(model):
    feeds = {"ids": np.array([[0, 5, 299], [-1, 17, 150]], np.int64),
             "ids2": np.array([[2, 2, 3], [298, -300, 7]], np.int64)}
    if any(i.name == "x" for i in model.graph.input):
        feeds["x"] = np.random.default_rng(1).standard_normal((1, 300)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("table_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("scheme", [{}, dict(granularity="channel"), dict(granularity="tensor"),
                                    dict(dtype="uint8", symmetric=True), dict(dtype="int4"),
                                    dict(dtype="int4", symmetric=True, granularity="channel"),
                                    dict(dtype="uint4", block_size=16)],
                         ids=["defaults", "channel", "tensor", "uint8-sym", "int4", "int4-sym-channel", "uint4-b16"])
def test_embedding_table_stays_integer_and_gathers_exactly(tmp_path, table_dtype, scheme):
    """Under auto, a table read only by Gather keeps its integers in the graph: each Gather
    picks integer rows and dequantizes those. The gathered values are bit-identical to
    dequantizing the whole table first (the arith lowering). (They are graph outputs here: with
    float16 tables, onnxruntime may run a consumer in float32 and drop the final Cast, which it
    cannot do once the whole chain is folded.)"""
    model = _embedding_model(table_dtype)
    _, out, report = _quant(tmp_path, model, **scheme)
    (label,) = report.pass_report("quantize").details["schemes"]
    assert label.startswith(scheme.get("dtype", "int8")) and label.endswith("/gather")
    graph = onnx.load(str(out)).graph
    ints = {t.name for t in graph.initializer if t.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
            and np.prod(t.dims) == 300 * 64}
    four_bit = "4" in scheme.get("dtype", "")
    if four_bit:  # packed row by row: half the bytes, still one row per index
        ints = {t.name for t in graph.initializer
                if t.data_type == onnx.TensorProto.UINT8 and list(t.dims) == [300, 32]}
    assert len(ints) == 1
    readers = [n.op_type for n in graph.node if set(n.input) & ints]
    assert readers == ["Gather", "Gather"]  # never Cast: no float copy of the whole table
    whole = tmp_path / "arith.onnx"
    onnxsurgery.quant_file(tmp_path / "in.onnx", whole, min_elements=1024, lowering="arith", **scheme)
    feeds = _embedding_feeds(model)
    for got, expected, original in zip(run(out, feeds), run(whole, feeds), run(model, feeds)):
        assert got.dtype == table_dtype and got.shape == (2, 3, 64)
        assert np.array_equal(got, expected)
        rel = np.linalg.norm(got.astype(np.float64) - original) / np.linalg.norm(original.astype(np.float64))
        assert 0 < rel < (0.15 if "4" in scheme.get("dtype", "") else 0.02)


def test_int4_table_below_opset_11_is_dequantized_whole(tmp_path):
    """uint8 BitShift needs opset 11: below it a 4-bit table keeps the whole-table chain (with
    the arith lowering; auto upgrades the model to opset 21 and gathers it)."""
    model = _embedding_model(opset=10)
    _, out, report = _quant(tmp_path, model, dtype="int4", lowering="arith")
    (label,) = report.pass_report("quantize").details["schemes"]
    assert label.endswith("/arith")
    assert report.verification["rel_l2_error"] < 0.15
    _, out, report = _quant(tmp_path, model, dtype="int4")
    (label,) = report.pass_report("quantize").details["schemes"]
    assert label.endswith("/gather") and onnx.load(str(out)).opset_import[0].version == 21


def test_table_also_read_by_matmul_is_dequantized_whole(tmp_path):
    model = _embedding_model(also_matmul=True)
    _, out, report = _quant(tmp_path, model)
    (label,) = report.pass_report("quantize").details["schemes"]
    # not gathered: one float copy, the column scales after the Gathers and the MatMul alike
    assert label.endswith("/scaled")
    feeds = _embedding_feeds(model)
    for got, original in zip(run(out, feeds), run(model, feeds)):
        assert np.linalg.norm(got - original) / np.linalg.norm(original) < 0.02


# -- verification's sessions --------------------------------------------------------------------


def test_mapped_reference_reads_weights_from_the_file_and_computes_the_same(tmp_path):
    """The reference session maps its large tensors from the input file (initializers, a
    Constant node and an If branch's initializer here) and computes exactly what loading the
    file does."""
    from onnxsurgery.running import sessions

    model = builders.quant_cases()
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    mapped = sessions._mapped_session(src, sessions.session_settings())  # no fallback on this path
    plain = sessions.session(src)
    for seed in (0, 1):
        feeds = {"ids": np.array([3, 77], np.int64), "c": np.array(bool(seed))}
        assert all(np.array_equal(a, b) for a, b in zip(mapped.run(None, feeds), plain.run(None, feeds)))


def test_unfolded_session_keeps_the_dequantization_at_run_time(tmp_path):
    """What quant's verification relies on: with fold_constants=False onnxruntime leaves the
    Cast/Sub/Mul chain in the graph (run per inference, not stored as a float weight), and the
    outputs are those of the folded session."""
    import onnxruntime as ort

    from onnxsurgery.running import sessions

    model = builders.quant_cases()
    _, out, _ = _quant(tmp_path, model, lowering="arith")
    feeds = {"ids": np.array([3, 77], np.int64), "c": np.array(True)}
    outputs, casts = [], []
    for fold in (True, False):
        opts, kwargs = sessions.session_settings(fold_constants=fold)
        opts.optimized_model_filepath = str(tmp_path / f"opt{fold}.onnx")
        outputs.append(ort.InferenceSession(str(out), opts, **kwargs).run(None, feeds)[0])
        optimized = onnx.load(str(tmp_path / f"opt{fold}.onnx"))
        casts.append(sum(n.op_type == "Cast" for g in graphs_everywhere(optimized.graph) for n in g.node))
    assert casts[0] == 0 and casts[1] >= 3
    assert np.allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)


def test_sessions_keep_conv_weights_in_their_own_layout(tmp_path):
    """Verification's sessions leave Conv in the standard layout (no blocked copy of each
    weight), which onnxruntime's default settings rewrite to NCHWc on this machine; the
    outputs are the same function."""
    import onnxruntime as ort

    from onnxsurgery.running import sessions

    src = tmp_path / "conv.onnx"
    onnx.save(builders.conv_model(), str(src))
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype(np.float32)}
    domains, outputs = [], []
    for ours in (False, True):
        default = (ort.SessionOptions(), {"providers": ["CPUExecutionProvider"]})
        opts, kwargs = sessions.session_settings() if ours else default
        opts.optimized_model_filepath = str(tmp_path / f"opt{ours}.onnx")
        opts.log_severity_level = 3
        outputs.append(ort.InferenceSession(str(src), opts, **kwargs).run(None, feeds)[0])
        domains.append({n.domain for n in onnx.load(str(tmp_path / f"opt{ours}.onnx")).graph.node})
    assert domains[1] == {""}
    assert np.allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    if "com.microsoft.nchwc" not in domains[0]:  # the check above then proves nothing
        pytest.skip("onnxruntime's defaults do not use NCHWc on this CPU (no AVX2)")



def test_generated_token_ids_cover_tables_read_from_a_file(tmp_path):
    """Generated indices span each gathered table (an initializer stored lazily, a Constant
    node), not just 0-9, when the model is given as a path; other integers stay small."""
    from onnx import TensorProto, helper, numpy_helper

    from onnxsurgery.running import sessions, verify
    from onnxsurgery.running.feeds import make_inputs

    b = builders
    nodes = [b.const_node("small", b.rand((20, 4), 2)),
             helper.make_node("Gather", ["big", "ids"], ["e1"]),
             helper.make_node("Gather", ["small", "pos"], ["e2"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT)]
    m = b.model(nodes, [b.vi("ids", TensorProto.INT64, [256]), b.vi("pos", TensorProto.INT64, [256]),
                        b.vi("n", TensorProto.INT64, [256])],
                [b.vi("e1", shape=[256, 8]), b.vi("e2", shape=[256, 4]), b.vi("nf", shape=[256])],
                [numpy_helper.from_array(b.rand((3000, 8), 1), "big")])
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    feeds = make_inputs(sessions.session(src), model=src)
    assert 1000 < feeds["ids"].max() < 3000
    assert 10 <= feeds["pos"].max() < 20
    assert feeds["n"].max() < 10
    assert verify.compare_models(src, src)["exact"]


def test_fp16_weight_read_only_inside_if_branches_loads_unfolded(tmp_path):
    """A float16-stored weight that only subgraphs read gets its Cast inside each reading
    branch: a Cast in the outer graph read implicitly by the If node makes onnxruntime 1.31
    fail to load the model with constant folding off (FuseInitializersTransformer)."""
    from onnx import TensorProto, helper, numpy_helper

    b = builders

    def branch(i):
        return helper.make_graph([helper.make_node("MatMul", ["x", "W"], [f"y{i}"])], f"b{i}", [],
                                 [b.vi(f"y{i}", shape=[1, 64])])

    m = b.model([helper.make_node("If", ["c"], ["y"], then_branch=branch(1), else_branch=branch(2))],
                [b.vi("x", shape=[1, 64]), b.vi("c", TensorProto.BOOL, [])], [b.vi("y", shape=[1, 64])],
                [numpy_helper.from_array(b.rand((64, 64), 5), "W")])
    src, out, report = _quant(tmp_path, m, fp16=True)  # verification loads the result unfolded
    assert report.verification["rel_l2_error"] < 1e-3
    saved = onnx.load(str(out))
    assert not any(n.op_type == "Cast" for n in saved.graph.node)
    branches = [g for g in graphs_everywhere(saved.graph) if g is not saved.graph]
    assert all(sum(n.op_type == "Cast" for n in g.node) == 1 for g in branches)
    from onnxsurgery.running import sessions

    feeds = {"x": b.rand((1, 64), 6), "c": np.array(False)}
    got = sessions.session(out, fold_constants=False).run(None, feeds)[0]
    want = feeds["x"] @ b.rand((64, 64), 5).astype(np.float16).astype(np.float32)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()


def test_a_weight_the_budget_leaves_float_says_so():
    """A weight the budget allocates float32 (or its own float16 type) is not "matched by
    --exclude" when no --exclude was given: its record says the budget chose it."""
    from onnx import helper, numpy_helper

    from onnxsurgery.quantization.choices.planner import plan_weights

    w = builders.rand((64, 64), 1)
    h = builders.rand((64, 64), 2).astype(np.float16)
    m = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Cast", ["y"], ["yh"], to=10),
                        helper.make_node("MatMul", ["yh", "H"], ["z"])], [builders.vi("x", shape=[2, 64])],
                       [builders.vi("z", onnx.TensorProto.FLOAT16, [2, 64])],
                       [numpy_helper.from_array(w, "W"), numpy_helper.from_array(h, "H")])
    graph = onnxsurgery.import_graph(m)
    plan = plan_weights(graph, QuantOptions(min_elements=16, allocation={"W": "float32", "H": "kept"}), 17, frozenset())
    assert {r.name: r.why for r in plan.weights} == {"W": "allocated float32 by the budget",
                                                     "H": "allocated its own type by the budget"}
    excluded = plan_weights(graph, QuantOptions(min_elements=16, exclude=("W",)), 17, frozenset())
    assert excluded.record("W").why == "matched by --exclude"
