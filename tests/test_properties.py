"""Property-based tests (hypothesis): random small graphs whose constants, of random dtypes and
ranks (scalars included), are duplicated across the main graph and If/Loop bodies. shrink and
npy -> embed must compute bit-identical outputs in onnxruntime, and quant's output must stay
within the error it reports."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import onnxsurgery
from conftest import run

DTYPES = [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_]
PLACES = ["main", "then", "loop"]
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def constants(draw):
    """(values, places): a few distinct arrays, each placed one to three times, so that equal
    constants sit in different scopes under different names."""
    distinct = []
    for _ in range(draw(st.integers(1, 4))):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
        seed = draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed)
        value = rng.random(shape) < 0.5 if dtype is np.bool_ else (rng.standard_normal(shape) * 50).astype(dtype)
        distinct.append(np.asarray(value, dtype))
    placed = []
    for value in distinct:
        for place in draw(st.lists(st.sampled_from(PLACES), min_size=1, max_size=3)):
            placed.append((value, place))
    return placed


def build(placed) -> onnx.ModelProto:
    """Each placed constant becomes an output: read by Identity in the main graph, in an If's
    then-branch (else: the same shape of zeros), or as a Loop scan output (one iteration)."""
    nodes, outputs, inits = [], [], []
    then_nodes, else_nodes, then_out, else_out, if_outputs = [], [], [], [], []
    body_nodes, body_out, loop_outputs = [], [], []
    for i, (value, place) in enumerate(placed):
        name, elem = f"c{i}", helper.np_dtype_to_tensor_dtype(value.dtype)
        tensor = numpy_helper.from_array(value, name)
        if place == "main":
            inits.append(tensor)
            nodes.append(helper.make_node("Identity", [name], [f"y{i}"]))
            outputs.append(helper.make_tensor_value_info(f"y{i}", elem, list(value.shape)))
        elif place == "then":
            then_nodes.append(helper.make_node("Constant", [], [f"t{i}"], value=tensor))
            else_nodes.append(helper.make_node("Constant", [], [f"e{i}"],
                                               value=numpy_helper.from_array(np.zeros_like(value), f"z{i}")))
            then_out.append(helper.make_tensor_value_info(f"t{i}", elem, list(value.shape)))
            else_out.append(helper.make_tensor_value_info(f"e{i}", elem, list(value.shape)))
            if_outputs.append(helper.make_tensor_value_info(f"y{i}", elem, list(value.shape)))
        else:
            inits.append(tensor)  # read from the outer scope inside the body
            body_nodes.append(helper.make_node("Identity", [name], [f"b{i}"]))
            body_out.append(helper.make_tensor_value_info(f"b{i}", elem, list(value.shape)))
            loop_outputs.append(helper.make_tensor_value_info(f"y{i}", elem, [1, *value.shape]))
    if if_outputs:
        nodes.append(helper.make_node(
            "If", ["cond"], [o.name for o in if_outputs],
            then_branch=helper.make_graph(then_nodes, "then", [], then_out),
            else_branch=helper.make_graph(else_nodes, "else", [], else_out)))
        outputs += if_outputs
    if loop_outputs:
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]), *body_nodes], "body",
            [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), *body_out])
        inits.append(numpy_helper.from_array(np.array(1, np.int64), "trips"))
        nodes.append(helper.make_node("Loop", ["trips", "cond"], [o.name for o in loop_outputs], body=body))
        outputs += loop_outputs
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _bit_identical(model, path):
    for cond in (True, False):
        feeds = {"cond": np.array(cond)}
        for a, b in zip(run(model, feeds), run(path, feeds)):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _shrink(src, tmp):
    onnxsurgery.shrink_file(src, tmp / "out.onnx", min_elements=1, verify=False)
    return tmp / "out.onnx"


def _npy_then_embed(src, tmp):
    onnxsurgery.npy_file(src, tmp / "moved.onnx", min_elements=1)
    onnxsurgery.embed_file(tmp / "moved.onnx", tmp / "back.onnx")
    return tmp / "back.onnx"


@pytest.mark.parametrize("command", [_shrink, _npy_then_embed], ids=["shrink", "npy-embed"])
@SETTINGS
@given(placed=constants())
def test_lossless_commands_are_bit_identical(tmp_path_factory, command, placed):
    model, tmp = build(placed), tmp_path_factory.mktemp("lossless")
    onnx.save(model, str(tmp / "in.onnx"))
    _bit_identical(model, command(tmp / "in.onnx", tmp))


@SETTINGS
@given(placed=constants())
def test_quant_stays_within_the_error_it_reports(tmp_path_factory, placed):
    model, tmp = build(placed), tmp_path_factory.mktemp("quant")
    onnx.save(model, str(tmp / "in.onnx"))
    feeds = {"cond": np.array(True)}
    report = onnxsurgery.quant_file(tmp / "in.onnx", tmp / "q.onnx", min_elements=1, samples=[feeds])
    reported = report.verification["rel_l2_error"]
    for a, b in zip(run(model, feeds), run(tmp / "q.onnx", feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.kind == "f" and np.linalg.norm(a.astype(np.float64)) > 0:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            assert np.linalg.norm(b64 - a64) / np.linalg.norm(a64) <= reported * (1 + 1e-6) + 1e-12
        elif a.dtype.kind != "f":
            assert a.tobytes() == b.tobytes()
