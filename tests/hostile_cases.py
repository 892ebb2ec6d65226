"""The hostile models of test_hostile_models.py: each case a small function that writes a model (and
any files it names) into a folder and returns the model's path, and the helpers they share."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

N = 64


def vi(name, dtype=TensorProto.FLOAT, shape=(2, N)):
    return helper.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None)


def w_array(seed=1, shape=(N, N)):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.1).astype(np.float32)


def make(nodes, inputs, outputs, inits=(), opset=17, ir=8, opsets=None) -> onnx.ModelProto:
    """A model built without onnx's checker (most cases here would fail it, on purpose)."""
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=opsets if opsets is not None else [helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def base(w: onnx.TensorProto | None = None, **kw) -> onnx.ModelProto:
    """y = x @ W + b, W [64, 64]: every weight-touching command has something to do."""
    w = w if w is not None else numpy_helper.from_array(w_array(), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    return make(nodes, [vi("x")], [vi("y")], [w, numpy_helper.from_array(w_array(2, (N,)), "b")], **kw)


def save(folder: Path, m: onnx.ModelProto) -> Path:
    path = folder / "m.onnx"
    path.write_bytes(m.SerializeToString())
    return path


def external_w(location: str, offset: int = 0, length: int | None = N * N * 4, dims=(N, N)) -> onnx.TensorProto:
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=list(dims), data_location=TensorProto.EXTERNAL)
    stated = None if length is None else str(length)
    for key, value in (("location", location), ("offset", str(offset)), ("length", stated)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, value
    return w


def raw_w(raw: bytes, dims=(N, N), dtype=TensorProto.FLOAT) -> onnx.TensorProto:
    return TensorProto(name="W", data_type=dtype, dims=list(dims), raw_data=raw)


# -- initializers whose bytes and dims disagree ---------------------------------------------------

def raw_short(d):
    return save(d, base(raw_w(w_array().tobytes()[:-4])))


def raw_long(d):
    return save(d, base(raw_w(w_array().tobytes() + b"\0" * 4)))


def dims_bomb(d):
    """10^12 elements claimed, 16 KB held: must fail fast, not allocate 4 TB."""
    return save(d, base(raw_w(w_array().tobytes(), dims=(10 ** 6, 10 ** 6))))


def dims_bomb_external(d):
    (d / "w.bin").write_bytes(w_array().tobytes())
    return save(d, base(external_w("w.bin", length=None, dims=(10 ** 6, 10 ** 6))))


def negative_dims(d):
    return save(d, base(raw_w(w_array().tobytes(), dims=(-N, -N))))


def zero_size_weight(d):
    """A [0, 64] weight concatenated to the activation: legal, and nothing to quantize in it."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Concat", ["h", "Z"], ["y"], axis=0)]
    inits = [numpy_helper.from_array(w_array(), "W"), numpy_helper.from_array(np.zeros((0, N), np.float32), "Z")]
    return save(d, make(nodes, [vi("x")], [vi("y")], inits))


def undefined_dtype(d):
    return save(d, base(raw_w(w_array().tobytes(), dtype=TensorProto.UNDEFINED)))


def unknown_dtype(d):
    return save(d, base(raw_w(w_array().tobytes(), dtype=999)))


# -- external data ---------------------------------------------------------------------------------

def ext_offset_past_end(d):
    (d / "w.bin").write_bytes(w_array().tobytes())
    return save(d, base(external_w("w.bin", offset=10 ** 9)))


def ext_length_past_end(d):
    (d / "w.bin").write_bytes(w_array().tobytes()[:100])
    return save(d, base(external_w("w.bin")))


def ext_no_length_longer_file(d):
    """No `length`, the file longer than the dims need: onnxruntime reads what the dims need."""
    (d / "w.bin").write_bytes(w_array().tobytes() + b"tail" * 8)
    return save(d, base(external_w("w.bin", length=None)))


def ext_length_overflows(d):
    (d / "w.bin").write_bytes(w_array().tobytes())
    return save(d, base(external_w("w.bin", length=2 ** 64 + N * N * 4)))


def ext_negative_offset(d):
    (d / "w.bin").write_bytes(w_array().tobytes())
    return save(d, base(external_w("w.bin", offset=-16)))


def ext_same_bytes_twice(d):
    """Two tensors naming the same bytes: legal (a writer that dedups does it)."""
    (d / "w.bin").write_bytes(w_array().tobytes())
    w2 = external_w("w.bin")
    w2.name = "W2"
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "W2"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y")], [external_w("w.bin"), w2]))


def ext_offset_not_a_number(d):
    (d / "w.bin").write_bytes(w_array().tobytes())
    w = external_w("w.bin")
    w.external_data[1].value = "0x10"
    return save(d, base(w))


def ext_empty_location(d):
    return save(d, base(external_w("")))


def sparse_out_of_range(d):
    """A sparse initializer whose indices point past its dense shape."""
    values = numpy_helper.from_array(np.ones(3, np.float32), "W")
    indices = numpy_helper.from_array(np.array([0, 5, N * N + 7], np.int64), "W_i")
    m = base(numpy_helper.from_array(w_array(3), "W0"))
    m.graph.initializer.pop(0)
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [N, N]))
    return save(d, m)


def sparse_weight(d):
    """A valid sparse initializer: every command handles it (an internal error in all before)."""
    values = numpy_helper.from_array(np.arange(1, 4, dtype=np.float32), "W")
    indices = numpy_helper.from_array(np.array([0, 5, N * N - 1], np.int64), "W_i")
    m = base(numpy_helper.from_array(w_array(3), "W0"))
    m.graph.initializer.pop(0)
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [N, N]))
    return save(d, m)


def huge_rank_product(d):
    """dims whose product passes int64 (2^40 x 2^40), 16 KB held."""
    return save(d, base(raw_w(w_array().tobytes(), dims=(2 ** 40, 2 ** 40))))


def ext_directory(d):
    (d / "w.bin").mkdir()
    return save(d, base(external_w("w.bin")))


def ext_fifo(d):
    os.mkfifo(d / "w.bin")
    return save(d, base(external_w("w.bin")))


def ext_dotdot_inside(d):
    """`sub/../w.bin` comes back into the folder: fine."""
    (d / "sub").mkdir()
    (d / "w.bin").write_bytes(w_array().tobytes())
    return save(d, base(external_w("sub/../w.bin")))


def ext_windows_path(d):
    return save(d, base(external_w("C:\\models\\w.bin")))


def ext_nul(d):
    (d / "w.bin").write_bytes(w_array().tobytes())
    return save(d, base(external_w("w.bin\0.txt")))


def ext_missing(d):
    return save(d, base(external_w("nowhere.bin")))


# -- graph structure -------------------------------------------------------------------------------

def cycle(d):
    nodes = [helper.make_node("Add", ["x", "b2"], ["a"]), helper.make_node("MatMul", ["a", "W"], ["b2"]),
             helper.make_node("Identity", ["a"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y")], [numpy_helper.from_array(w_array(), "W")]))


def dangling_input(d):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "ghost"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y")], [numpy_helper.from_array(w_array(), "W")]))


def two_producers(d):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("Identity", ["h"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y")], [numpy_helper.from_array(w_array(), "W")]))


def two_initializers_one_name(d):
    """Two initializers named W with different values: which one a reader gets is undefined."""
    m = base()
    m.graph.initializer.append(numpy_helper.from_array(w_array(7), "W"))
    return save(d, m)


def output_is_initializer(d):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y"), vi("W", shape=(N, N))], [numpy_helper.from_array(w_array(), "W")]))


def overridable_weight(d):
    """W is an initializer and a graph input (IR >= 4): a caller may feed another W. quant must
    not bake the default in as a constant silently."""
    m = base()
    m.graph.input.append(vi("W", shape=(N, N)))
    return save(d, m)


def subgraph_missing_outer(d):
    then_g = helper.make_graph([helper.make_node("MatMul", ["h", "nowhere"], ["t"])], "then", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Identity", ["h"], ["e"])], "else", [], [vi("e")])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    return save(d, make(nodes, [vi("x"), vi("c", TensorProto.BOOL, ())], [vi("y")],
                        [numpy_helper.from_array(w_array(), "W")]))


# -- values ----------------------------------------------------------------------------------------

def _with(values) -> onnx.ModelProto:
    w = w_array()
    w.flat[: len(values)] = values
    return base(numpy_helper.from_array(w, "W"))


def nan_weight(d):
    return save(d, _with([np.nan]))


def inf_weight(d):
    return save(d, _with([np.inf, -np.inf]))


def nan_constant_node(d):
    """The weight as a Constant node's value, holding NaN."""
    w = w_array()
    w[3, 3] = np.nan
    nodes = [helper.make_node("Constant", [], ["W"], value=numpy_helper.from_array(w, "W")),
             helper.make_node("MatMul", ["x", "W"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y")]))


def fp16_inf_weight(d):
    """A float16 model with an infinite weight."""
    w = w_array().astype(np.float16)
    w[0, 1] = np.inf
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    return save(d, make(nodes, [vi("x", TensorProto.FLOAT16)], [vi("y", TensorProto.FLOAT16)],
                        [numpy_helper.from_array(w, "W")]))


def denormal_weight(d):
    return save(d, base(numpy_helper.from_array(np.full((N, N), 1e-41, np.float32), "W")))


def original_nan(d):
    """Log of a normal input: NaN on half the generated values before anything is changed."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Log", ["x"], ["l"]),
             helper.make_node("Add", ["h", "l"], ["y"])]
    return save(d, make(nodes, [vi("x")], [vi("y")], [numpy_helper.from_array(w_array(), "W")]))


def beyond_fp16(d):
    """float32 weights above float16's 65504: stored in float16 they become inf."""
    w = w_array() * 1e6
    return save(d, base(numpy_helper.from_array(w, "W")))


def int64_gather_table(d):
    """An int64 index table read by Gather: not a weight, stays int64 whatever the options."""
    nodes = [helper.make_node("Gather", ["T", "ids"], ["i"], axis=0),
             helper.make_node("Gather", ["E", "i"], ["y"], axis=0)]
    inits = [numpy_helper.from_array(np.arange(N * N, dtype=np.int64)[::-1].copy() % N, "T"),
             numpy_helper.from_array(w_array(), "E")]
    return save(d, make(nodes, [vi("ids", TensorProto.INT64, (2,))], [vi("y")], inits))


# -- opsets and IR versions ------------------------------------------------------------------------

def no_opset(d):
    return save(d, base(opsets=[]))


def opset_0(d):
    return save(d, base(opset=0))


def opset_99(d):
    return save(d, base(opset=99))


def custom_domain_no_version(d):
    return save(d, base(opsets=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 0)]))


def ir_0(d):
    return save(d, base(ir=0))


def ir_3_initializer_not_input(d):
    """IR 3 wants every initializer listed among the inputs; this one is not."""
    return save(d, base(ir=3, opset=8))


def ir_99(d):
    return save(d, base(ir=99))


# -- files -----------------------------------------------------------------------------------------

def empty_file(d):
    path = d / "m.onnx"
    path.write_bytes(b"")
    return path


def a_directory(d):
    (d / "m.onnx").mkdir()
    return d / "m.onnx"


CASES = [raw_short, raw_long, dims_bomb, dims_bomb_external, negative_dims, zero_size_weight, undefined_dtype,
         unknown_dtype, ext_offset_past_end, ext_length_past_end, ext_no_length_longer_file, ext_length_overflows,
         ext_negative_offset, ext_offset_not_a_number, ext_empty_location, sparse_out_of_range, sparse_weight,
         huge_rank_product,
         ext_same_bytes_twice, ext_directory, ext_fifo, ext_dotdot_inside, ext_windows_path,
         ext_nul, ext_missing, cycle, dangling_input, two_producers, two_initializers_one_name, output_is_initializer,
         overridable_weight, subgraph_missing_outer, nan_weight, inf_weight, nan_constant_node, fp16_inf_weight,
         denormal_weight, original_nan, beyond_fp16, int64_gather_table, no_opset, opset_0, opset_99,
         custom_domain_no_version, ir_0, ir_3_initializer_not_input, ir_99, empty_file, a_directory]
