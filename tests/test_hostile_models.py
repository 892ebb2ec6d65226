"""Structurally valid but hostile or inconsistent models (the kind exporters and attackers make):
every command must either succeed, its output computing what the input computes, or print one
clean line on stderr with exit 2, write nothing, and leave the input's folder byte for byte as it
was. test_fuzz.py damages bytes, which mostly breaks the protobuf parse; these parse.

Each case is a small function that writes a model (and any files it names) into a folder and
returns the model's path; every command in COMMANDS runs on it through the CLI."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.cli import main

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

COMMANDS = {
    "info": lambda m, o: ["info", m],
    "shrink": lambda m, o: ["shrink", m, o],
    "shrink --verify": lambda m, o: ["shrink", "--verify", m, o],
    "quant": lambda m, o: ["quant", "--min-elements", "16", m, o],
    "quant int4": lambda m, o: ["quant", "--dtype", "int4", "--min-elements", "16", m, o],
    "quant --fp16": lambda m, o: ["quant", "--fp16", "--min-elements", "16", m, o],
    "quant --no-verify": lambda m, o: ["quant", "--no-verify", "--min-elements", "16", m, o],
    "quant --fp16 --no-verify": lambda m, o: ["quant", "--fp16", "--no-verify", "--min-elements", "16", m, o],
    "quant int4 --no-verify": lambda m, o: ["quant", "--dtype", "int4", "--no-verify", "--min-elements", "16", m, o],
    "quant --inputs": lambda m, o: ["quant", "--inputs", o.parent.parent / "feeds.npz", "--min-elements", "16", m, o],
    "npy": lambda m, o: ["npy", "--min-bytes", "0", m, o],
    "compare": lambda m, o: ["compare", m, m],
}


# Cases whose every command (but those listed) must refuse: a success there is a guess
REFUSED = {
    # which of the two a reader gets is its own choice: quant's verification read the other one
    # than onnxruntime and wrote its result with a warning of 1.48 relative error
    "two_initializers_one_name": {"compare"},
    # an index past the end: onnxruntime refuses it, gs made it a model that ran
    "sparse_out_of_range": {"compare"},
}


def folder_state(folder: Path) -> dict[str, str]:
    """Every entry under `folder` with its kind and, for files, a hash of its bytes."""
    state = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            state[rel] = "link:" + os.readlink(p)
        elif p.is_fifo():
            state[rel] = "fifo"
        elif p.is_dir():
            state[rel] = "dir"
        else:
            state[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return state


def outputs_of(path: Path, feeds) -> list[np.ndarray] | None:
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the inputs' own oddities (opset 0, W as an input) are the point
        sess = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception:
        return None


def feeds_for(path: Path) -> dict[str, np.ndarray]:
    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == TensorProto.BOOL:
            feeds[i.name] = np.array(True)
        elif t.elem_type == TensorProto.INT64:
            feeds[i.name] = rng.integers(0, N, size=shape).astype(np.int64)
        else:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def differs(model: Path, out: Path, exact: bool) -> str | None:
    """Why the output written does not compute what the input computes, or None."""
    try:
        feeds = feeds_for(model)
    except Exception:
        return None  # nothing to run it on: the refusal paths above cover such inputs
    expected = outputs_of(model, feeds)
    extra = {}
    if (out.parent / "o.npy.json").exists():
        from onnxsurgery.storage.npy import load_feeds
        extra = load_feeds(out)
    got = outputs_of(out, {**feeds, **extra})
    if expected is None:
        return None if got is None else "the input does not run in onnxruntime, the output does"
    if got is None:
        return "the output does not run"
    for a, b in zip(expected, got):
        if a.shape != b.shape:
            return f"shape {a.shape} -> {b.shape}"
        if exact:
            if a.tobytes() != b.tobytes():
                return "not bit-identical"
            continue
        if (~np.isfinite(b) & np.isfinite(a)).any():
            return "NaN or inf where the input computes a number"
        finite = np.isfinite(a)
        err = np.linalg.norm(a[finite] - b[finite]) / max(np.linalg.norm(a[finite]), 1e-30)
        if err > 0.5:
            return f"relative error {err:.3g}"
    return None


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_hostile_model(tmp_path, case):
    src = tmp_path / "in"
    src.mkdir()
    model = case(src)
    before = folder_state(src)
    (tmp_path / "out").mkdir()
    try:
        np.savez(tmp_path / "out" / "feeds.npz", **feeds_for(model))
    except Exception:
        np.savez(tmp_path / "out" / "feeds.npz", x=np.zeros((2, N), np.float32))
    problems = []
    for name, command in COMMANDS.items():
        out_dir = tmp_path / "out" / name.replace(" ", "_")
        out_dir.mkdir(parents=True)
        out = out_dir / "o.onnx"
        r = CliRunner().invoke(main, [str(a) for a in command(model, out)])
        what = f"{name}: exit {r.exit_code} {r.stderr.strip()[-300:]!r} {r.exception!r}"
        print(case.__name__, what)
        if r.exit_code not in (0, 2):
            problems.append(what)
        if case.__name__ in REFUSED and name not in REFUSED[case.__name__] and r.exit_code != 2:
            problems.append("not refused: " + what)
        if folder_state(src) != before:
            problems.append("input changed: " + what)
        if r.exit_code == 2:
            lines = r.stderr.strip().splitlines()
            if not (len(lines) == 1 and lines[0].startswith("onnxsurgery: error:")):
                problems.append("not one line: " + what)
            if list(out_dir.iterdir()):
                problems.append("written: " + what)
        elif name not in ("info", "compare"):
            wrong = differs(model, out, exact=not name.startswith("quant"))
            if wrong:
                problems.append(f"{wrong}: {what}")
    assert not problems, "\n".join(problems)


# -- files: where the output goes -------------------------------------------------------------------

WRITERS = {
    "shrink": lambda m, o: ["shrink", m, o],
    "quant": lambda m, o: ["quant", "--min-elements", "16", m, o],
    "quant --no-verify": lambda m, o: ["quant", "--no-verify", "--min-elements", "16", m, o],
    "npy": lambda m, o: ["npy", "--min-bytes", "0", m, o],
}


def _targets(tmp_path: Path, model: Path) -> dict[str, Path]:
    """Outputs that cannot be written: the input itself (without --in-place), a folder that does
    not exist, a 'folder' that is a file, and (not as root, which may write anywhere) a read-only
    folder. (An existing folder is no error: like cp, the output goes into it.)"""
    (tmp_path / "plain.txt").write_text("not a folder")
    targets = {"the input": model, "missing folder": tmp_path / "nope" / "o.onnx",
               "under a file": tmp_path / "plain.txt" / "o.onnx"}
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o555)
        targets["read-only folder"] = tmp_path / "ro" / "o.onnx"
    return targets


@pytest.mark.parametrize("command", list(WRITERS))
def test_an_output_that_cannot_be_written_is_one_line(tmp_path, command):
    src = tmp_path / "in"
    src.mkdir()
    model = save(src, base())
    before_in, before_all = folder_state(src), folder_state(tmp_path)
    for what, target in _targets(tmp_path, model).items():
        r = CliRunner().invoke(main, [str(a) for a in WRITERS[command](model, target)])
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("onnxsurgery: error:"), \
            f"{what}: {r.exit_code} {r.stderr} {r.exception!r}"
        assert folder_state(src) == before_in, what
    after = folder_state(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith(("plain", "ro"))} == before_all


@pytest.mark.parametrize("command", list(WRITERS))
def test_ctrl_c_while_writing_leaves_no_partial_file(tmp_path, monkeypatch, command):
    """KeyboardInterrupt from inside the writer, after some bytes went out: no output, no
    temporary file beside it, the input as it was, and the interrupted exit code."""
    from onnxsurgery.storage import staging

    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    model = save(src, base())
    before = folder_state(src)
    real = staging.write_pieces

    def interrupted(f, pieces, files):
        f.write(b"partial")
        real(f, pieces[:1], files)
        raise KeyboardInterrupt

    def interrupted_copy(source, target):  # shrink with nothing to merge copies the file
        Path(target).write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(staging, "write_pieces", interrupted)
    monkeypatch.setattr(staging, "copy_large_file", interrupted_copy)
    r = CliRunner().invoke(main, [str(a) for a in WRITERS[command](model, out / "o.onnx")])
    assert r.exit_code == 130, (r.exit_code, r.stderr, r.exception)
    assert "interrupted (Ctrl-C)" in r.stderr
    assert list(out.iterdir()) == [] and folder_state(src) == before


def test_a_nan_error_is_the_worst_wherever_it_comes():
    """max() keeps a NaN only in first place: a sample's NaN error read after a number's passed."""
    from onnxsurgery.running.output_errors import PooledOutputs, compare_outputs, worst_of

    assert np.isnan(worst_of([0.1, float("nan"), 0.2])) and worst_of([0.1, 0.3]) == 0.3 and worst_of([]) == 0.0
    ref = np.ones((2, 4), np.float32)
    nan_ref = ref.copy()
    nan_ref[0, 0] = np.nan  # the original's own NaN where the result has a number
    pooled = PooledOutputs()
    pooled.add(compare_outputs([ref], [ref * 1.01], ["y"]))
    pooled.add(compare_outputs([nan_ref], [ref], ["y"]))
    entry = pooled.finish(["y"], ["y"])["y"]
    assert np.isnan(entry["rel_l2_error"]) and entry["original_not_finite"] == 1 and entry["not_finite"] == 0


def test_a_nan_verdict_is_a_refusal():
    from onnxsurgery.api.verdict import judge
    from onnxsurgery.errors import VerificationError
    from onnxsurgery.report import RunReport

    report = RunReport.__new__(RunReport)
    report.verification = {"rel_l2_error": float("nan"), "outputs": {}, "not_finite": 0, "original_not_finite": 3}
    report.notes, report.warnings = [], []
    with pytest.raises(VerificationError, match="not a number.*original itself computes NaN or infinity at 3"):
        judge(report, None, False)
    report.verification["rel_l2_error"] = 0.01
    judge(report, None, False)
    assert report.notes == ["the original computes NaN or infinity at 3 output values on the verification inputs: "
                            "the errors are over the other values"]


@pytest.mark.parametrize("args", [[], ["--dtype", "int4"], ["--no-verify"]])
def test_an_overridable_weight_stays_overridable(tmp_path, args):
    """W is an initializer and a graph input: quant leaves it a default a caller may replace."""
    model = overridable_weight(tmp_path)
    out = tmp_path / "q.onnx"
    r = CliRunner().invoke(main, ["quant", "--min-elements", "16", *args, str(model), str(out)])
    assert r.exit_code == 0, r.output
    assert "W" in {i.name for i in onnx.load(str(out)).graph.input}
    feeds = {"x": np.ones((2, N), np.float32), "W": np.full((N, N), 0.5, np.float32)}  # another W
    a, b = outputs_of(model, feeds)[0], outputs_of(out, feeds)[0]
    assert np.abs(a - b).max() < 0.05 * np.abs(a).max()  # only b's rounding, not a baked-in W
