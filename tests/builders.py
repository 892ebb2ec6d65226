"""Tiny models built in code, one per case the passes must handle, and a recorder of the runs
verification makes with them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR = 8


def rand(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def const_node(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def log_of_length(x: str, threshold: float, out: str) -> list[onnx.NodeProto]:
    """Nodes computing `out` = log(x's axis-1 length - threshold): NaN for inputs no longer than
    `threshold` (a model that computes no number on short generated samples)."""
    return [
        helper.make_node("Shape", [x], ["shape"]),
        const_node("one", np.array(1, np.int64)),
        helper.make_node("Gather", ["shape", "one"], ["length"]),
        helper.make_node("Cast", ["length"], ["flength"], to=TensorProto.FLOAT),
        const_node("threshold", np.array(threshold, np.float32)),
        helper.make_node("Sub", ["flength", "threshold"], ["left"]),
        helper.make_node("Log", ["left"], [out]),
    ]


def vi(name, dtype=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, initializers=(), opset=OPSET, ir=IR) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    onnx.checker.check_model(m)
    return m


def duplicate_initializers(n_copies=3, size=16) -> onnx.ModelProto:
    """x -> MatMul W0 -> MatMul W1 -> ... where every W is the same matrix under another name."""
    w = rand((size, size), 1)
    inits = [numpy_helper.from_array(w, f"W{i}") for i in range(n_copies)]
    nodes, prev = [], "x"
    for i in range(n_copies):
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"]))
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return model(nodes, [vi("x", shape=[2, size])], [vi("y", shape=[2, size])], inits)


def duplicate_constant_nodes() -> onnx.ModelProto:
    """Two Constant nodes and one initializer holding the same bias; plus a distinct one."""
    b = rand((32,), 2)
    other = rand((32,), 3)
    nodes = [
        const_node("c0", b),
        const_node("c1", b.copy()),
        const_node("c2", other),
        helper.make_node("Add", ["x", "c0"], ["a"]),
        helper.make_node("Add", ["a", "c1"], ["b"]),
        helper.make_node("Add", ["b", "c2"], ["c"]),
        helper.make_node("Add", ["c", "B_init"], ["y"]),
    ]
    return model(nodes, [vi("x", shape=[4, 32])], [vi("y", shape=[4, 32])],
                 [numpy_helper.from_array(b, "B_init")])


def if_and_loop_subgraphs() -> onnx.ModelProto:
    """Duplicates inside If branches and a Loop body, which also read outer-scope tensors.

    - outer initializer W; the then-branch holds an equal Constant node, the else-branch an
      equal initializer, both next to reads of outer `x` and `W`;
    - the branches also hold two equal Constant nodes K (siblings: neither sees the other);
    - the Loop body holds a Constant equal to W and reads outer `x`.
    """
    w = rand((8, 8), 4)
    k = rand((2, 8), 5)
    then_g = helper.make_graph(
        [const_node("then_W", w), const_node("then_K", k),
         helper.make_node("MatMul", ["x", "then_W"], ["t0"]),
         helper.make_node("MatMul", ["t0", "W"], ["t1"]),
         helper.make_node("Add", ["t1", "then_K"], ["t_out"])],
        "then", [], [vi("t_out", shape=[2, 8])])
    else_g = helper.make_graph(
        [const_node("else_K", k.copy()),
         helper.make_node("MatMul", ["x", "else_W"], ["e0"]),
         helper.make_node("Sub", ["e0", "else_K"], ["e_out"])],
        "else", [], [vi("e_out", shape=[2, 8])],
        initializer=[numpy_helper.from_array(w.copy(), "else_W")])
    body = helper.make_graph(
        [const_node("body_W", w.copy()),
         helper.make_node("MatMul", ["acc_in", "body_W"], ["m"]),
         helper.make_node("Add", ["m", "x"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
         vi("acc_in", shape=[2, 8])],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", shape=[2, 8])])
    nodes = [
        helper.make_node("If", ["c"], ["if_out"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "", "if_out"], ["y"], body=body),
    ]
    inits = [numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(np.array(3, dtype=np.int64), "trip")]
    return model(nodes, [vi("c", TensorProto.BOOL, []), vi("x", shape=[2, 8])],
                 [vi("y", shape=[2, 8])], inits)


def constant_graph_outputs() -> onnx.ModelProto:
    """Equal constants that are themselves graph outputs: their names must survive."""
    w = rand((4, 4), 6)
    nodes = [
        const_node("out_const_node", w),
        helper.make_node("Add", ["x", "W_a"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w.copy(), "W_a"), numpy_helper.from_array(w.copy(), "out_init")]
    return model(nodes, [vi("x", shape=[4, 4])],
                 [vi("y", shape=[4, 4]), vi("out_const_node", shape=[4, 4]),
                  vi("out_init", shape=[4, 4])], inits)


def fp16_and_int64() -> onnx.ModelProto:
    """fp16 weights and int64 Gather indices, each duplicated once; same bytes, other dtype."""
    h = rand((16, 16), 7, np.float16)
    idx = np.arange(20, dtype=np.int64) % 16
    nodes = [
        helper.make_node("MatMul", ["x", "H0"], ["a"]),
        helper.make_node("MatMul", ["a", "H1"], ["b"]),
        helper.make_node("Gather", ["b", "I0"], ["g0"], axis=1),
        helper.make_node("Gather", ["b", "I1"], ["g1"], axis=1),
        helper.make_node("Concat", ["g0", "g1"], ["y"], axis=1),
    ]
    # A uint16 tensor with the same bytes as H must not be merged with it.
    inits = [numpy_helper.from_array(h, "H0"), numpy_helper.from_array(h.copy(), "H1"),
             numpy_helper.from_array(idx, "I0"), numpy_helper.from_array(idx.copy(), "I1")]
    return model(nodes, [vi("x", TensorProto.FLOAT16, [2, 16])],
                 [vi("y", TensorProto.FLOAT16, [2, 40])], inits)


def transposed_pair(vocab=40, hidden=8) -> onnx.ModelProto:
    """A tied embedding: E (vocab x hidden) read by Gather, and E.T (hidden x vocab) as an
    LM head read by MatMul."""
    e = rand((vocab, hidden), 8)
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["h"], axis=0),
        helper.make_node("MatMul", ["h", "E_T"], ["logits"]),
    ]
    inits = [numpy_helper.from_array(e, "E"), numpy_helper.from_array(np.ascontiguousarray(e.T), "E_T")]
    return model(nodes, [vi("ids", TensorProto.INT64, [1, 5])],
                 [vi("logits", shape=[1, 5, vocab])], inits)


def narrowing_cases() -> onnx.ModelProto:
    """int64 constants: Gather indices (may narrow), a Reshape shape and an Add operand (must
    not), an index too large for int32 (must not); a float64 Cast input that may narrow."""
    nodes = [
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),  # [2, 20]
        helper.make_node("Reshape", ["g", "shape"], ["r"]),        # [40]
        helper.make_node("Cast", ["r"], ["r64"], to=TensorProto.INT64),
        helper.make_node("Add", ["r64", "offset"], ["y_int"]),
        helper.make_node("Cast", ["dbl"], ["dbl32"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "dbl32"], ["y"]),
        helper.make_node("Cast", ["big"], ["y_big"], to=TensorProto.FLOAT),
    ]
    inits = [
        numpy_helper.from_array(np.arange(20, dtype=np.int64) % 8, "idx"),
        numpy_helper.from_array(np.array([40], dtype=np.int64), "shape"),
        numpy_helper.from_array(np.arange(40, dtype=np.int64), "offset"),
        numpy_helper.from_array(np.linspace(0, 1, 8).astype(np.float32).astype(np.float64), "dbl"),
        numpy_helper.from_array(np.array([2**40] * 20, dtype=np.int64), "big"),
    ]
    return model(nodes, [vi("x", shape=[2, 8])],
                 [vi("y", shape=[2, 8]), vi("y_int", TensorProto.INT64, [40]),
                  vi("y_big", TensorProto.FLOAT, [20])], inits)


def feeds_for(m: onnx.ModelProto, seed=0) -> dict[str, np.ndarray]:
    """Inputs for the builders above."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in m.graph.input:
        if inp.name in {t.name for t in m.graph.initializer}:
            continue
        t = inp.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == TensorProto.BOOL:
            feeds[inp.name] = np.array(seed % 2 == 0)
        elif t.elem_type == TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, 8, size=shape).astype(np.int64)
        else:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def quant_cases(opset=OPSET, ir=IR, weight_dtype=np.float32) -> onnx.ModelProto:
    """Weights of every kind quant must handle, each 64x64 or larger:
    - W_mm: MatMul B initializer, also read by a second MatMul (shared weight);
    - W_const: a Constant-node weight;
    - W_if: a weight inside an If branch (then), the else branch is an Identity;
    - E: a Gather table (embedding), read by index input `ids`;
    - small: a bias under min_elements that must stay float.
    Weights in `weight_dtype` (float32 or float16); the graph computes in that dtype."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(weight_dtype))
    w = lambda shape, seed: (rand(shape, seed) * 0.1).astype(weight_dtype)  # noqa: E731
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["h2", "W_if"], ["t"])], "then", [], [vi("t", elem, [2, 64])],
        initializer=[numpy_helper.from_array(w((64, 64), 23), "W_if")])
    else_g = helper.make_graph([helper.make_node("Identity", ["h2"], ["e"])], "else", [], [vi("e", elem, [2, 64])])
    nodes = [
        helper.make_node("Gather", ["E", "ids"], ["emb"], axis=0),       # [2, 64]
        helper.make_node("MatMul", ["emb", "W_mm"], ["h0"]),
        helper.make_node("MatMul", ["h0", "W_mm"], ["h1"]),             # shared weight
        const_node("W_const", w((64, 64), 22)),
        helper.make_node("MatMul", ["h1", "W_const"], ["h1b"]),
        helper.make_node("Add", ["h1b", "small"], ["h2"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    inits = [numpy_helper.from_array(w((128, 64), 20), "E"), numpy_helper.from_array(w((64, 64), 21), "W_mm"),
             numpy_helper.from_array(w((64,), 24), "small")]
    return model(nodes, [vi("ids", TensorProto.INT64, [2]), vi("c", TensorProto.BOOL, [])],
                 [vi("y", elem, [2, 64])], inits, opset=opset, ir=ir)


def conv_model(opset=OPSET) -> onnx.ModelProto:
    """A Conv weight [16, 8, 3, 3] with one all-zero output channel and one constant channel."""
    wt = rand((16, 8, 3, 3), 30) * 0.1
    wt[3] = 0.0
    wt[5] = 0.25
    nodes = [helper.make_node("Conv", ["x", "Wc"], ["y"], pads=[1, 1, 1, 1])]
    return model(nodes, [vi("x", shape=[1, 8, 8, 8])], [vi("y", shape=[1, 16, 8, 8])],
                 [numpy_helper.from_array(wt.astype(np.float32), "Wc")], opset=opset)


def tensorrt_prep_model(opset=12) -> onnx.ModelProto:
    """What a TensorRT prep script meets: an embedding table (Gather), a MatMul, a Gemm with
    transB, a Conv and an LSTM, at an opset below what per-channel DequantizeLinear needs."""
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"]),                       # [1, 8, 64]
             helper.make_node("LSTM", ["emb", "W", "R", "B"], ["seq"], hidden_size=32),   # [8, 1, 1, 32]
             helper.make_node("Reshape", ["seq", "flat"], ["h"]),                          # [8, 32]
             helper.make_node("MatMul", ["h", "Wm"], ["m"]),                               # [8, 128]
             helper.make_node("Gemm", ["m", "Wg"], ["g"], transB=1),                       # [8, 64]
             helper.make_node("Reshape", ["g", "img_shape"], ["img"]),                     # [2, 16, 4, 4]
             helper.make_node("Conv", ["img", "Wc"], ["y"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(rand((512, 64), 1), "table"),
             numpy_helper.from_array(rand((1, 128, 64), 2) * 0.2, "W"),
             numpy_helper.from_array(rand((1, 128, 32), 3) * 0.2, "R"),
             numpy_helper.from_array(rand((1, 256), 4) * 0.1, "B"),
             numpy_helper.from_array(np.array([8, 32], np.int64), "flat"),
             numpy_helper.from_array(rand((32, 128), 5) * 0.2, "Wm"),
             numpy_helper.from_array(rand((64, 128), 6) * 0.1, "Wg"),
             numpy_helper.from_array(np.array([2, 16, 4, 4], np.int64), "img_shape"),
             numpy_helper.from_array(rand((32, 16, 3, 3), 7) * 0.1, "Wc")]
    return model(nodes, [vi("ids", TensorProto.INT64, [8, 1])],
                 [vi("y", shape=[2, 32, 4, 4])], inits, opset=opset)


def in_float_arithmetic(model) -> onnx.ModelProto:
    """A copy of `model` (ModelProto or path) whose com.microsoft MatMulNBits nodes compute in
    float (accuracy_level 0): the outputs of dequantizing the stored integers first, for tests
    that check those integers exactly. quant writes accuracy_level 4 (int8 activations)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model if isinstance(model, onnx.ModelProto) else onnx.load(str(model)))
    for node in matmul_nbits_nodes(copy):
        for attr in node.attribute:
            if attr.name == "accuracy_level":
                attr.i = 0
    return copy


def matmul_nbits_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Every MatMulNBits node of `model`, subgraphs included."""
    found, graphs = [], [model.graph]
    while graphs:
        graph = graphs.pop()
        for node in graph.node:
            if node.op_type == "MatMulNBits":
                found.append(node)
            graphs += [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    return found


def tf2onnx_shape_copies(hidden=128, opset=OPSET) -> onnx.ModelProto:
    """What tf2onnx writes for a BERT: weights W0, W1 [hidden, hidden] read by MatMul, and the
    same bytes again as [1, 1, 8, hidden/8, hidden] tensors:

    - S0 (an initializer) and S1 (a Constant node in an If branch) read only by Shape, with and
      without start/end, to build the shapes of Reshapes;
    - R1 read by a Mul (its values matter), the same bytes as W1 under another shape;
    - tiny T (2 x 8) and T_flat (16): equal bytes, too small for a Reshape to pay.
    """
    w0, w1 = rand((hidden, hidden), 11), rand((hidden, hidden), 12)
    heads = hidden // 16
    split = [1, 1, heads, hidden // heads, hidden]
    t = rand((2, 8), 13)
    then_g = helper.make_graph(
        [const_node("then_S1", w1.reshape(split)),
         helper.make_node("Shape", ["then_S1"], ["then_last"], start=-1),
         helper.make_node("Concat", ["minus_one", "then_last"], ["then_dims"], axis=0),
         helper.make_node("Reshape", ["h2", "then_dims"], ["t_out"])],
        "then", [], [vi("t_out", shape=[4, hidden])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["h2"], ["e_out"])], "else", [], [vi("e_out", shape=[4, hidden])])
    nodes = [
        helper.make_node("MatMul", ["x", "W0"], ["h0"]),
        helper.make_node("Shape", ["S0"], ["s0_heads"], start=2, end=3),
        helper.make_node("Shape", ["S0"], ["s0_all"]),
        helper.make_node("Concat", ["minus_one", "s0_heads"], ["split_dims"], axis=0),
        helper.make_node("Reshape", ["h0", "split_dims"], ["h1"]),
        helper.make_node("Reshape", ["h1", "x_dims"], ["h1b"]),
        helper.make_node("MatMul", ["h1b", "W1"], ["h2"]),
        helper.make_node("Mul", ["x5", "R1"], ["r"]),
        helper.make_node("Add", ["x16", "T"], ["t_sum"]),
        helper.make_node("Mul", ["x16f", "T_flat"], ["t_prod"]),
        helper.make_node("If", ["c"], ["branch"], then_branch=then_g, else_branch=else_g),
    ]
    inits = [numpy_helper.from_array(w0, "W0"), numpy_helper.from_array(w1, "W1"),
             numpy_helper.from_array(w0.reshape(split), "S0"),
             numpy_helper.from_array(w1.reshape(split).copy(), "R1"),
             numpy_helper.from_array(t, "T"), numpy_helper.from_array(t.reshape(16).copy(), "T_flat"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
             numpy_helper.from_array(np.array([4, hidden], np.int64), "x_dims")]
    return model(nodes, [vi("x", shape=[4, hidden]), vi("x5", shape=split), vi("x16", shape=[2, 8]),
                         vi("x16f", shape=[16]), vi("c", TensorProto.BOOL, [])],
                 [vi("h2", shape=[4, hidden]), vi("s0_all", TensorProto.INT64, [5]), vi("r", shape=split),
                  vi("t_sum", shape=[2, 8]), vi("t_prod", shape=[16]), vi("branch", shape=[4, hidden])],
                 inits, opset=opset)


def qdq_static(hidden=64, opset=OPSET) -> onnx.ModelProto:
    """An int8 QDQ model as static quantization writes it: activations through QuantizeLinear ->
    DequantizeLinear with one scale and zero point shared by every pair (read more than once,
    so `npy` selects them by default), weights int8 behind DequantizeLinear."""
    w0, w1 = rand((hidden, hidden), 31) * 0.1, rand((hidden, hidden), 32) * 0.1
    sw = np.float32(0.002)
    q = lambda w: np.clip(np.round(w / sw), -127, 127).astype(np.int8)  # noqa: E731
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_a", "z_a"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s_a", "z_a"], ["xd"]),
        helper.make_node("DequantizeLinear", ["W0_q", "s_w", "z_w"], ["W0"]),
        helper.make_node("MatMul", ["xd", "W0"], ["h"]),
        helper.make_node("QuantizeLinear", ["h", "s_a", "z_a"], ["hq"]),
        helper.make_node("DequantizeLinear", ["hq", "s_a", "z_a"], ["hd"]),
        helper.make_node("DequantizeLinear", ["W1_q", "s_w", "z_w"], ["W1"]),
        helper.make_node("MatMul", ["hd", "W1"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "s_a"),
             numpy_helper.from_array(np.array(3, np.uint8), "z_a"),
             numpy_helper.from_array(np.array(sw, np.float32), "s_w"),
             numpy_helper.from_array(np.array(0, np.int8), "z_w"),
             numpy_helper.from_array(q(w0), "W0_q"), numpy_helper.from_array(q(w1), "W1_q")]
    return model(nodes, [vi("x", shape=[4, hidden])], [vi("y", shape=[4, hidden])], inits, opset=opset)


def outlier_model() -> onnx.ModelProto:
    """B: in each column one block of 32 input rows is 40x larger, a different block per
    column, so every row and every column has large values (neither the output channel's
    scale nor the input-side equalization can separate them) while each block is even."""
    plain = rand((256, 64), 1) * 0.05
    rows, cols = np.indices(plain.shape)
    outlier = plain * np.where(rows // 32 == cols % 8, 40.0, 1.0).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "A"], ["h"]),
             helper.make_node("Concat", ["h", "h", "h", "h"], ["h2"], axis=1),
             helper.make_node("MatMul", ["h2", "B"], ["y"])]
    return model(nodes, [vi("x", shape=[2, 256])], [vi("y", shape=[2, 64])],
                          [numpy_helper.from_array(plain, "A"), numpy_helper.from_array(outlier, "B")])


def batches_run(monkeypatch) -> list[int]:
    """The batch of each run of verification's sessions (running.runs.run), in order, from now."""
    from onnxsurgery.running import runs

    real, batches = runs.run, []

    def recorded(sess, names, feeds):
        batches.append(next(iter(feeds.values())).shape[0])
        return real(sess, names, feeds)

    monkeypatch.setattr(runs, "run", recorded)
    return batches



def quantized_within(src, out, feeds: dict[str, np.ndarray], bound: float, **options) -> None:
    """`quant_file(src, out, **options)`, then both files run in onnxruntime on `feeds`: the
    result's first output finite and within `bound` (relative L2) of the original's."""
    import onnxruntime as ort

    import onnxsurgery

    onnxsurgery.quant_file(src, out, **options)
    ref, got = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
                for p in (src, out))
    assert np.all(np.isfinite(got)) and np.linalg.norm(got - ref) / np.linalg.norm(ref) < bound


def fused_by_onnxruntime(proto: onnx.ModelProto, tmp_path) -> bool:
    """Whether onnxruntime's default CPU session fuses a DequantizeLinear -> MatMul of `proto` into
    MatMulNBits: its optimized graph, written by the session itself, holds one."""
    import onnxruntime as ort

    path, optimized = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(proto, str(path))
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(optimized)
    options.log_severity_level = 3
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return any(n.op_type == "MatMulNBits" for n in onnx.load(str(optimized)).graph.node)
