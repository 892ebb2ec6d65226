"""Clear words where onnxruntime's own would come through: an --inputs key the model does not
take, a model onnxruntime cannot load, and a verification header that names only what applies."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from builders import model, rand, vi
from click.testing import CliRunner
from onnx import helper, numpy_helper

import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.errors import InputError, VerificationError
from onnxsurgery.running.verify import compare_models, runtime_label


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def two_inputs() -> onnx.ModelProto:
    """y = (a + b) @ W, W 32 x 32, written twice so that shrink and npy have work."""
    w = rand((32, 32), 1)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("MatMul", ["s", "W"], ["h"]),
             helper.make_node("MatMul", ["h", "W2"], ["y"])]
    return model(nodes, [vi("a", shape=[2, 32]), vi("b", shape=[2, 32])], [vi("y", shape=[2, 32])],
                 [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w.copy(), "W2")])


def custom_op() -> onnx.ModelProto:
    """A node of a domain onnxruntime does not know, between two copies of a weight."""
    w = rand((16, 16), 2)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Frobnicate", ["h"], ["f"], domain="example.custom"),
             helper.make_node("MatMul", ["f", "W2"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", shape=[2, 16])], [vi("y", shape=[2, 16])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(w.copy(), "W2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)])
    m.ir_version = 8
    return m


@pytest.fixture
def npz(tmp_path):
    def _npz(**arrays):
        path = tmp_path / "inputs.npz"
        np.savez(path, **arrays)
        return path
    return _npz


x = np.ones((2, 32), np.float32)


@pytest.mark.parametrize("command", ["compare", "run", "quant"])
def test_an_inputs_key_the_model_lacks_is_named_with_the_models_inputs(save, tmp_path, npz, command):
    src = save(two_inputs(), "m.onnx")
    args = {"compare": ("compare", src, src), "run": ("run", src),
            "quant": ("quant", src, tmp_path / "q.onnx", "--min-elements", "16")}[command]
    r = invoke(*args, "--inputs", npz(a=x, foo=x))
    assert r.exit_code == 2
    assert r.output == f"onnxsurgery: error: --inputs has 'foo', which {src} does not take; its inputs are: a, b\n"
    assert not (tmp_path / "q.onnx").exists()


def test_an_inputs_file_lacking_an_input_says_which(save, npz):
    src = save(two_inputs(), "m.onnx")
    r = invoke("compare", src, src, "--inputs", npz(a=x))
    assert r.exit_code == 2
    assert r.output == f"onnxsurgery: error: --inputs lacks 'b', which {src} needs; its inputs are: a, b\n"
    r = invoke("run", src, "--inputs", npz(a=x))  # run generates what is not given
    assert r.exit_code == 0, r.output


def test_the_api_raises_input_error(save):
    src = save(two_inputs(), "m.onnx")
    with pytest.raises(InputError, match="--inputs has 'c'"):
        compare_models(src, src, samples=[{"a": x, "b": x}, {"a": x, "c": x}])
    with pytest.raises(InputError, match="its inputs are: a, b"):
        onnxsurgery.run_model(src, {"nope": x})


def test_shrink_of_a_model_onnxruntime_cannot_load_says_so(save, tmp_path):
    src = save(custom_op(), "custom.onnx")
    out = tmp_path / "o.onnx"
    r = invoke("shrink", src, out)
    assert r.exit_code == 0, r.output
    notes = [line for line in r.output.splitlines() if line.startswith("  note: not checked in onnxruntime")]
    assert len(notes) == 1 and "Frobnicate" in notes[0], r.output
    assert out.exists() and out.stat().st_size < src.stat().st_size  # shrunk all the same

    out.unlink()
    r = invoke("shrink", src, out, "--verify")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert f"onnxruntime cannot load {src}" in r.output and "nothing written" in r.output
    assert not out.exists()


def test_verify_runs_the_copy_when_nothing_changed(save, tmp_path):
    m = model([helper.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", shape=[2, 16])], [vi("y", shape=[2, 16])],
              [numpy_helper.from_array(rand((16, 16), 3), "W")])
    src, out = save(m, "plain.onnx"), tmp_path / "o.onnx"
    report = onnxsurgery.shrink_file(src, out, verify=True)
    assert report.notes == ["nothing to shrink: the output is a copy of the input"]
    assert report.verification["exact"] and out.read_bytes() == src.read_bytes()
    # and refused, nothing written, when onnxruntime cannot load it
    lone = custom_op()
    del lone.graph.initializer[1]
    lone.graph.node[2].input[1] = "W"
    src = save(lone, "lone.onnx")
    with pytest.raises(VerificationError, match="nothing written"):
        onnxsurgery.shrink_file(src, tmp_path / "lone_out.onnx", verify=True)
    assert not (tmp_path / "lone_out.onnx").exists()
    report = onnxsurgery.shrink_file(src, tmp_path / "lone_out.onnx")
    assert any(n.startswith("not checked in onnxruntime") for n in report.notes)


def test_npy_notes_that_run_will_not_run_it(save, tmp_path):
    src = save(custom_op(), "custom.onnx")
    report = onnxsurgery.npy_file(src, tmp_path / "g.onnx")
    assert any("onnxruntime cannot load" in n for n in report.notes)
    report = onnxsurgery.npy_file(save(two_inputs(), "m.onnx"), tmp_path / "g2.onnx")
    assert not report.notes


def dq_matmul(op="MatMul") -> onnx.ModelProto:
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["w"]), helper.make_node(op, ["x", "w"], ["y"])]
    return model(nodes, [vi("x", shape=[2, 16])], [vi("y", shape=[2, 16])],
                 [numpy_helper.from_array(np.ones((16, 16), np.int8), "q"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "s")])


def test_the_header_names_the_matmulnbits_fusion_only_where_it_applies(save):
    plain = save(two_inputs(), "plain.onnx")
    label = compare_models(plain, plain)["runtime"]
    assert label.endswith("CPU, default graph optimizations") and "MatMulNBits" not in label
    fused = save(dq_matmul(), "dq.onnx")
    assert compare_models(fused, fused)["runtime"].endswith(
        "(DequantizeLinear -> MatMul fused into MatMulNBits with int8 activations)")
    assert "MatMulNBits" not in runtime_label("onnxruntime", dq_matmul("Add"))  # DQ, but no MatMul reads it
    nbits = helper.make_model(helper.make_graph(
        [helper.make_node("MatMulNBits", ["x", "b", "sc"], ["y"], domain="com.microsoft", K=16, N=16, bits=4,
                          block_size=16)], "g", [vi("x")], [vi("y")]))
    assert "MatMulNBits at the accuracy_level" in runtime_label("onnxruntime", nbits)
    web = runtime_label("onnxruntime-web", two_inputs())
    assert "as onnxruntime-web computes" in web and "DequantizeLinear" not in web
    assert "fused with float activations" in runtime_label("onnxruntime-web", dq_matmul())
    assert "int8 activations" in runtime_label("onnxruntime")  # no model: as before


def test_an_opset_newer_than_onnxruntime_runs_is_said_in_one_line(tmp_path):
    """A model stamped with an opset the installed onnxruntime does not run yet: one line naming
    the opset and what onnxruntime runs, not its C++ check's file, line and signature."""
    import onnxruntime

    from onnxsurgery.running.ort_messages import first_line

    newest = onnx.defs.onnx_opset_version()
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi("x", shape=[2])],
                              [vi("y", shape=[2])])
    newer = helper.make_model(graph, opset_imports=[helper.make_opsetid("", newest + 2)])
    newer.ir_version = onnx.IR_VERSION
    onnx.save(newer, str(tmp_path / "new.onnx"))
    r = CliRunner().invoke(main, ["quant", str(tmp_path / "new.onnx"), str(tmp_path / "q.onnx"), "--min-elements", "1"])
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert f"opset {newest + 2}, newer than onnxruntime {onnxruntime.__version__} runs" in line
    assert "onnxruntime_src" not in line and not (tmp_path / "q.onnx").exists()
    missing = RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
                           "Frob(28) node with name 'n1'")
    assert first_line(missing) == f"onnxruntime {onnxruntime.__version__} has no CPU kernel for Frob at opset 28 " \
                                   "(node 'n1')"
