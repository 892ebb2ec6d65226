"""shrink's main pass: merging bit-identical constants, checked on the saved file."""

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from conftest import all_tensors, assert_same_outputs, builders

import onnxsurgery
from onnxsurgery.graph_api import merge_duplicate_constants


def shrink_to_file(model, tmp_path, **options):
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src))
    out = tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(src, out, **options)
    saved = onnx.load(str(out))
    onnx.checker.check_model(saved)
    return saved, report


def test_duplicate_initializers(tmp_path):
    m = builders.duplicate_initializers(n_copies=3, size=16)
    saved, report = shrink_to_file(m, tmp_path)
    assert [t.name for t in saved.graph.initializer] == ["W0"]
    assert {n.input[1] for n in saved.graph.node if n.op_type == "MatMul"} == {"W0"}
    p = report.pass_report("merge_duplicates")
    assert p.changed == 2 and p.bytes_saved == 2 * 16 * 16 * 4
    assert p.details["largest_groups"][0]["count"] == 3
    assert report.bytes_after < report.bytes_before
    assert (tmp_path / "out.onnx").stat().st_size < (tmp_path / "in.onnx").stat().st_size
    assert_same_outputs(m, tmp_path / "out.onnx")


def test_duplicate_constant_nodes_and_initializer(tmp_path):
    m = builders.duplicate_constant_nodes()
    saved, report = shrink_to_file(m, tmp_path)
    # The initializer survives (outermost, initializers first); both Constant nodes go.
    consts = [n for n in saved.graph.node if n.op_type == "Constant"]
    assert [n.output[0] for n in consts] == ["c2"]
    assert [t.name for t in saved.graph.initializer] == ["B_init"]
    assert report.pass_report("merge_duplicates").changed == 2
    assert_same_outputs(m, tmp_path / "out.onnx")


def _subgraphs(model):
    out = {}
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                out[f"{node.op_type}.{attr.name}"] = attr.g
    return out


def test_if_and_loop_subgraphs_share_outer_constant(tmp_path):
    m = builders.if_and_loop_subgraphs()
    saved, report = shrink_to_file(m, tmp_path)
    p = report.pass_report("merge_duplicates")
    # W: 4 copies (main, then-Constant, else-initializer, Loop-Constant); K: 2 sibling copies.
    assert p.changed == 4
    assert p.details["groups"] == 2
    # Exactly one 8x8 tensor and one 2x8 tensor left in the whole model.
    shapes = sorted(tuple(t.dims) for t in all_tensors(saved) if len(t.dims) == 2)
    assert shapes == [(2, 8), (8, 8)]
    # The survivors sit in the main graph, read by name from the branches and the body.
    assert {tuple(t.dims) for t in saved.graph.initializer} >= {(8, 8), (2, 8)}
    subs = _subgraphs(saved)
    assert not any(g.initializer for g in subs.values())
    assert all(n.op_type != "Constant" for g in subs.values() for n in g.node)
    assert_same_outputs(m, tmp_path / "out.onnx")


def test_subgraph_constant_never_replaces_outer_one():
    m = builders.if_and_loop_subgraphs()
    graph = gs.import_onnx(m)
    report = merge_duplicate_constants(graph)
    kept = report.details["largest_groups"][0]["kept"]
    # The main graph must not end up reading a tensor defined inside a subgraph.
    main_inputs = {t.name for n in graph.nodes for t in n.inputs}
    assert kept not in {"then_W", "body_W"}
    assert "then_W" not in main_inputs and "body_W" not in main_inputs


def test_constant_graph_outputs_keep_their_names(tmp_path):
    m = builders.constant_graph_outputs()
    saved, report = shrink_to_file(m, tmp_path)
    assert [o.name for o in saved.graph.output] == ["y", "out_const_node", "out_init"]
    assert report.pass_report("merge_duplicates").changed == 2
    assert sum(1 for t in all_tensors(saved) if tuple(t.dims) == (4, 4)) == 1
    assert_same_outputs(m, tmp_path / "out.onnx")


def test_fp16_and_int64(tmp_path):
    m = builders.fp16_and_int64()
    saved, report = shrink_to_file(m, tmp_path)
    names = sorted(t.name for t in saved.graph.initializer)
    assert names == ["H0", "I0"]
    assert saved.graph.initializer[0].data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.INT64)
    assert_same_outputs(m, tmp_path / "out.onnx")


def test_same_bytes_other_dtype_or_shape_not_merged():
    w = np.arange(16, dtype=np.float32)
    nodes = [
        onnx.helper.make_node("Add", ["x", "A"], ["a"]),
        onnx.helper.make_node("Reshape", ["a", "s"], ["r"]),
        onnx.helper.make_node("Add", ["r", "B"], ["b"]),
        onnx.helper.make_node("Cast", ["C"], ["c"], to=onnx.TensorProto.FLOAT),
        onnx.helper.make_node("Add", ["b", "c"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(w, "A"),
             onnx.numpy_helper.from_array(w.reshape(4, 4), "B"),
             onnx.numpy_helper.from_array(w.reshape(4, 4).view(np.int32), "C"),
             onnx.numpy_helper.from_array(np.array([4, 4], np.int64), "s")]
    m = builders.model(nodes, [builders.vi("x", shape=[16])], [builders.vi("y", shape=[4, 4])], inits)
    out, report = onnxsurgery.shrink(m)
    assert report.pass_report("merge_duplicates").changed == 0
    assert len(out.graph.initializer) == 4


def test_min_elements_leaves_small_constants(tmp_path):
    m = builders.duplicate_initializers(n_copies=2, size=4)  # 16 elements each
    _, merged = onnxsurgery.shrink(m, min_elements=16)
    _, left = onnxsurgery.shrink(m, min_elements=17)
    assert merged.pass_report("merge_duplicates").changed == 1
    assert left.pass_report("merge_duplicates").changed == 0


def test_typed_field_and_raw_tensors_compare_by_value(tmp_path):
    """A tensor stored in float_data equals the same values stored as raw bytes."""
    w = builders.rand((4, 8), 9)
    typed = onnx.helper.make_tensor("T", onnx.TensorProto.FLOAT, [4, 8], w.ravel().tolist())
    raw = onnx.numpy_helper.from_array(w, "R")
    nodes = [onnx.helper.make_node("Add", ["x", "T"], ["a"]), onnx.helper.make_node("Add", ["a", "R"], ["y"])]
    m = builders.model(nodes, [builders.vi("x", shape=[4, 8])], [builders.vi("y", shape=[4, 8])], [typed, raw])
    saved, report = shrink_to_file(m, tmp_path)
    assert report.pass_report("merge_duplicates").changed == 1
    assert_same_outputs(m, tmp_path / "out.onnx")


def test_pass_works_on_gs_graph_and_shrink_accepts_graph():
    graph = gs.import_onnx(builders.duplicate_initializers(n_copies=4))
    out, report = onnxsurgery.shrink(graph)
    assert report.pass_report("merge_duplicates").changed == 3
    assert len(out.graph.initializer) == 1
    assert out.ir_version <= 10  # loadable by the installed onnxruntime
    assert_same_outputs(builders.duplicate_initializers(n_copies=4), out)


def test_result_never_larger_than_input():
    m = builders.narrowing_cases()  # nothing to merge
    out, report = onnxsurgery.shrink(m)
    assert report.bytes_after <= report.bytes_before
    assert out.ByteSize() <= m.ByteSize()


@pytest.mark.parametrize("copies", [2, 5])  # 10 tensors: past MAX_DIRECT_COMPARE
def test_hash_groups_confirmed_byte_for_byte(copies, monkeypatch):
    """Even if every digest collided, only truly equal tensors are merged."""
    import onnxsurgery.passes.merge_constants as mc

    monkeypatch.setattr(mc, "fingerprint", lambda tensor, nbytes: b"same")
    w = [builders.rand((16,), s) for s in range(copies)]
    inits = [onnx.numpy_helper.from_array(w[i // 2], f"W{i}") for i in range(copies * 2)]
    nodes, prev = [], "x"
    for i in range(copies * 2):
        nodes.append(onnx.helper.make_node("Add", [prev, f"W{i}"], [f"h{i}"]))
        prev = f"h{i}"
    nodes.append(onnx.helper.make_node("Identity", [prev], ["y"]))
    m = builders.model(nodes, [builders.vi("x", shape=[16])], [builders.vi("y", shape=[16])], inits)
    out, report = onnxsurgery.shrink(m)
    assert report.pass_report("merge_duplicates").details["groups"] == copies
    assert len(out.graph.initializer) == copies
    assert_same_outputs(m, out)


def test_equal_dequantized_weights_in_sibling_branches_stay_in_their_branches(save, tmp_path):
    """Hoisted into the main graph, an If branch's DequantizeLinear -> MatMul reads an outer
    weight and scale, and onnxruntime 1.32 refuses to load the fused MatMulNBits
    ("TransposeDQWeightsForMatMulNBits Missing required weight")."""
    from onnx import TensorProto, helper, numpy_helper

    w = builders.rand((64, 64), 3) * 0.05
    scale = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)

    def branch(tag):
        return helper.make_graph(
            [helper.make_node("DequantizeLinear", [f"{tag}_q", f"{tag}_s", f"{tag}_z"], [f"{tag}_w"], axis=1),
             helper.make_node("MatMul", ["x", f"{tag}_w"], [f"{tag}_y"])],
            tag, [], [builders.vi(f"{tag}_y", shape=[2, 64])],
            initializer=[numpy_helper.from_array(q, f"{tag}_q"), numpy_helper.from_array(scale, f"{tag}_s"),
                         numpy_helper.from_array(np.zeros(64, np.int8), f"{tag}_z")])

    m = builders.model([helper.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else"))],
                       [builders.vi("x", shape=[2, 64]), builders.vi("c", TensorProto.BOOL, [])],
                       [builders.vi("y", shape=[2, 64])])
    out = tmp_path / "out.onnx"
    report = onnxsurgery.shrink_file(save(m), out, verify=True)
    assert report.pass_report("merge_duplicates").changed == 0
    assert_same_outputs(m, out)


@pytest.mark.parametrize("mapped", [True, False])
def test_file_payloads_differing_in_a_later_chunk_are_not_merged(tmp_path, monkeypatch, mapped):
    """Payloads in a file are compared through a mapping of the file (merge_constants._mapped),
    or, where there is none, a chunk at a time (COMPARE_CHUNK) through one reused buffer:
    either way tensors equal but in their last chunk, or equal but for a sample the fingerprint
    skips, stay apart, and equal ones still merge."""
    import contextlib

    import onnxsurgery.passes.merge_constants as mc

    views, real = [], mc._mapped

    @contextlib.contextmanager
    def counted(tensor):
        with real(tensor) as view:
            views.append(view is not None)
            yield view if mapped else None

    monkeypatch.setattr(mc, "_mapped", counted)
    from onnxsurgery.api import shrink_direct

    monkeypatch.setattr(shrink_direct, "direct_shrink", lambda *a, **k: None)  # this pass's own comparisons
    monkeypatch.setattr(mc, "COMPARE_CHUNK", 1000)  # 4096 float32: 17 chunks, the last one short
    monkeypatch.setattr(mc, "fingerprint", lambda tensor, nbytes: b"same")  # all reach the comparison
    base = builders.rand((64, 64), 0)
    late = base.copy()
    late.reshape(-1)[-1] += 1  # the last chunk differs
    early = base.copy()
    early.reshape(-1)[3] += 1  # the first chunk differs
    values = [base, late, base.copy(), early]
    inits = [onnx.numpy_helper.from_array(v, f"W{i}") for i, v in enumerate(values)]
    nodes, prev = [], "x"
    for i in range(len(values)):
        nodes.append(onnx.helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"]))
        prev = f"h{i}"
    nodes.append(onnx.helper.make_node("Identity", [prev], ["y"]))
    m = builders.model(nodes, [builders.vi("x", shape=[1, 64])], [builders.vi("y", shape=[1, 64])], inits)
    saved, report = shrink_to_file(m, tmp_path)
    p = report.pass_report("merge_duplicates")
    assert p.changed == 1 and p.details["largest_groups"][0]["merged"] == ["W2"]
    assert sorted(t.name for t in saved.graph.initializer) == ["W0", "W1", "W3"]
    assert_same_outputs(m, tmp_path / "out.onnx")
    assert views and all(views)  # each comparison had its mapping, used or not


def test_fingerprint_samples_read_their_own_pages_not_the_read_around(tmp_path, monkeypatch):
    """A fingerprint faults its samples in through a mapping advised MADV_RANDOM: each fault reads its
    own page, not the kernel's read-around window (read_ahead_kb, 8 MB on the bench machine), which
    read every weight of a decoder's layers whole before the plan (issue 58, cpu16)."""
    import mmap as real_mmap
    import types

    import onnxsurgery.passes.merge_constants as mc

    if not hasattr(real_mmap, "MADV_RANDOM"):
        pytest.skip("no madvise here")
    advised = []

    class Mapping(real_mmap.mmap):
        def madvise(self, option, *args):
            advised.append(option)
            return super().madvise(option, *args)

    names = {k: getattr(real_mmap, k) for k in dir(real_mmap) if k.isupper()}
    monkeypatch.setattr(mc, "mmap", types.SimpleNamespace(**names, mmap=Mapping))
    values = [builders.rand((256, 256), seed) for seed in (1, 2, 1)]  # 256 KB each: sampled, two equal
    inits = [onnx.numpy_helper.from_array(v, f"W{i}") for i, v in enumerate(values)]
    nodes = [onnx.helper.make_node("MatMul", ["x" if not i else f"h{i - 1}", f"W{i}"], [f"h{i}"]) for i in range(3)]
    graph = onnx.helper.make_graph(nodes, "g", [builders.vi("x", shape=[1, 256])], [builders.vi("h2", shape=[1, 256])],
                                   inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "in.onnx"
    onnx.save(model, str(src), save_as_external_data=True, location="in.onnx.data", size_threshold=0)
    report = onnxsurgery.shrink_file(src, tmp_path / "out.onnx", verify=False)
    assert report.pass_report("merge_duplicates").changed == 1  # the equal pair merged, the other kept
    assert real_mmap.MADV_RANDOM in advised
