"""What the seventeenth round's zoo models found, and the zoo's own code for them (zoo/README.md).

- luscinia_stress is a 194 MB LightGBM classifier with no tensor at all: its trees are 14 node
  attributes of 4.85M elements each. gs imported each element as a Python int or float: `quant`
  took 68 s and 3.7 GB to copy the file it could not change. Long list attributes now stay the
  model's AttributeProtos (storage/long_lists.py); the tests build a tree ensemble of 70,000
  single-leaf trees in code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxsurgery import quant_file, shrink_file
from onnxsurgery.pipeline import open_workspace
from onnxsurgery.storage.io import RawAttribute
from onnxsurgery.storage.long_lists import LONG_LIST

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions  # noqa: E402

TREES = LONG_LIST + 4464  # 70,000: each list attribute past LONG_LIST


def _forest(path: Path, trees: int = TREES) -> Path:
    """A TreeEnsembleRegressor of `trees` one-leaf trees (its prediction: the sum of their
    weights), then a MatMul by a weight so that `quant` has a tensor too."""
    weights = (np.arange(trees) % 7 - 3).astype(np.float32) / 1000
    forest = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["sum"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=list(range(trees)), nodes_nodeids=[0] * trees, nodes_featureids=[0] * trees,
        nodes_modes=["LEAF"] * trees, nodes_values=[0.0] * trees, nodes_truenodeids=[0] * trees,
        nodes_falsenodeids=[0] * trees, target_treeids=list(range(trees)), target_nodeids=[0] * trees,
        target_ids=[0] * trees, target_weights=weights.tolist(), post_transform="NONE")
    w = np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64)
    graph = helper.make_graph(
        [forest, helper.make_node("MatMul", ["x", "w"], ["y"])], "forest",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [None, 1]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 64])],
        [onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


def _run(path: Path, x: np.ndarray) -> list:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_long_list_attributes_are_not_imported_as_python_lists(tmp_path):
    ws = open_workspace(_forest(tmp_path / "forest.onnx"))
    forest = next(n for n in ws.graph.nodes if n.op == "TreeEnsembleRegressor")
    assert isinstance(forest.attrs["nodes_modes"], RawAttribute)
    assert isinstance(forest.attrs["target_weights"], RawAttribute)
    assert forest.attrs["n_targets"] == 1 and forest.attrs["post_transform"] == "NONE"  # short ones as gs has them
    src = onnx.load(str(tmp_path / "forest.onnx")).graph.node[0]
    assert list(forest.attrs) == [a.name for a in src.attribute]  # each in its place
    ws.close()


def test_a_long_list_reads_as_the_proto_reads(tmp_path):
    """readers.py describes an activation reader by its attributes, from the input file's proto and
    from the graph alike: a long list set aside is the same attribute, not its repr."""
    from onnxsurgery.running.readers import _plain

    path = _forest(tmp_path / "forest.onnx")
    ws = open_workspace(path)
    forest = next(n for n in ws.graph.nodes if n.op == "TreeEnsembleRegressor")
    src = onnx.load(str(path)).graph.node[0]
    for name in ("nodes_modes", "target_weights", "nodes_treeids"):
        proto = next(a for a in src.attribute if a.name == name)
        assert _plain(forest.attrs[name]) == _plain(helper.get_attribute_value(proto))
    ws.close()


def test_a_short_list_is_imported_as_gs_imports_it(tmp_path):
    ws = open_workspace(_forest(tmp_path / "forest.onnx", trees=100))
    forest = next(n for n in ws.graph.nodes if n.op == "TreeEnsembleRegressor")
    assert forest.attrs["nodes_modes"] == ["LEAF"] * 100
    ws.close()


def test_shrink_and_quant_write_the_trees_as_they_were(tmp_path):
    src = _forest(tmp_path / "forest.onnx")
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    shrink_file(src, tmp_path / "shrunk.onnx")
    quant_file(src, tmp_path / "quant.onnx")
    original = onnx.load(str(src)).graph.node[0].SerializeToString()
    for out in ("shrunk.onnx", "quant.onnx"):
        written = onnx.load(str(tmp_path / out))
        forest = next(n for n in written.graph.node if n.op_type == "TreeEnsembleRegressor")
        assert forest.SerializeToString() == original
        assert np.array_equal(_run(tmp_path / out, x)[0], _run(src, x)[0])


def test_minutiae_are_the_quality_map_over_its_threshold():
    out = np.zeros((1, 4, 5, 4), np.float32)
    out[0, 1, 2, 3], out[0, 3, 0, 3], out[0, 2, 2, 0] = 0.55, 0.54, 0.99  # channel 0 is not the decision
    found, sparse = decisions.minutiae({"head_conc": out}, None)
    assert sparse and found.sum() == 1 and found.reshape(4, 5)[1, 2]


def _opset9(path: Path, weight: bool) -> Path:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])] if weight else [helper.make_node("Relu", ["x"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64), "w")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], inits if weight else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    onnx.save(model, path)
    return path


def test_tensorrt_copies_an_old_opset_model_with_no_weight(tmp_path):
    """luscinia (opset 9, no tensor): `quant --target tensorrt` refused it ("--lowering dq with
    int8/channel needs opset 13"), where there was nothing to lower; the default copied it."""
    src = _opset9(tmp_path / "relu9.onnx", weight=False)
    report = quant_file(src, tmp_path / "out.onnx", target="tensorrt")
    assert report.weights == [] or not report.weights
    assert (tmp_path / "out.onnx").read_bytes() == src.read_bytes()

