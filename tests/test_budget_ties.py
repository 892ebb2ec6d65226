"""A budget that affords one of two weights of the same size whose measured ratios nearly tie takes
the same one whatever the weights' last bits (issue 55: PP-OCRv6 rec's conv2d_95 and conv2d_103,
1.6767 and 1.6740 as shipped, the other way round in bfloat16)."""

from __future__ import annotations

from dataclasses import dataclass

from onnxsurgery.quantization.choices.measures import TIE_MARGIN, ranked


@dataclass
class Cost:
    name: str
    ratio: float
    extra: int


def names(costs: list[Cost]) -> list[str]:
    return [c.name for c in ranked(costs, key=lambda c: c.ratio, twin=lambda c: c.extra)]


def test_a_near_tie_of_the_same_size_keeps_the_graph_order():
    shipped = [Cost("a", 2.0, 10), Cost("conv95", 1.6767, 8), Cost("conv103", 1.6740, 8), Cost("b", 1.6646, 8)]
    bf16 = [Cost("a", 2.0, 10), Cost("conv95", 1.6742, 8), Cost("conv103", 1.6759, 8), Cost("b", 1.6646, 8)]
    assert names(shipped) == names(bf16) == ["a", "conv95", "conv103", "b"]


def test_other_sizes_and_clear_gaps_keep_the_ratio_order():
    # a later weight of another shape, or one more than TIE_MARGIN ahead, stays ahead
    gap = 1 + 3 * TIE_MARGIN
    assert names([Cost("x", 1.0, 8), Cost("y", 1.001, 4)]) == ["y", "x"]
    assert names([Cost("x", 1.0, 8), Cost("y", gap, 8)]) == ["y", "x"]
    assert names([Cost("x", 1.0, 8), Cost("y", 1.001, 8)]) == ["x", "y"]


def _chain(order: list[int]):
    """x -> MatMul(w0) -> Relu -> MatMul(w1) -> Relu -> MatMul(w2): three 16x16 twins, with the
    initializers stored in `order`, each behind a Cast as zoo's bf16 storage puts them (its Casts
    first, in the initializers' order)."""
    import numpy as np
    import onnx_graphsurgeon as gs
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.full((16, 16), i + 1, np.float32), f"w{i}") for i in range(3)]
    casts = [helper.make_node("Cast", [f"w{i}"], [f"w{i}.f"], to=TensorProto.FLOAT) for i in range(3)]
    nodes, x = [], "x"
    for i in range(3):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}.f"], [f"m{i}"]))
        if i < 2:
            nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
            x = f"r{i}"
    g = helper.make_graph([casts[i] for i in order] + nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("m2", TensorProto.FLOAT, [1, 16])],
                          [weights[i] for i in order])
    return gs.import_onnx(helper.make_model(g))


def test_twins_tie_in_their_readers_order_whatever_the_initializers_order():
    """Robust5: the tie order came from the order the planner met the weights, which in zoo's bf16
    storage is its Casts' (the initializers'); it now comes from the readers' place in the graph."""
    import itertools

    from onnxsurgery.graph_utils import collect_constants
    from onnxsurgery.quantization.choices.measures import reader_order

    for order in itertools.permutations(range(3)):
        sites = collect_constants(_chain(list(order)))
        assert [s.name for s in sites] == [f"w{i}" for i in order]  # met as stored
        place = reader_order(sites)
        costs = [Cost(s.name, 1.0 + 1e-4 * i, 8) for i, s in enumerate(sites)]  # a near tie, any way round
        by_graph = ranked(costs, key=lambda c: c.ratio, twin=lambda c: c.extra, place=lambda c, p=place: p[c.name])
        assert [c.name for c in by_graph] == ["w0", "w1", "w2"], order


def test_a_graph_with_a_cycle_is_refused_in_one_line(tmp_path):
    """The tie order's walk from the inputs never ended on a graph with a cycle (an invalid model:
    onnxruntime refuses it); quant now says so and writes nothing."""
    import numpy as np
    import onnx
    from click.testing import CliRunner
    from onnx import TensorProto, helper, numpy_helper

    from onnxsurgery.cli import main

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), f"w{k}") for k in (1, 2)]
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["m1"]),
             helper.make_node("MatMul", ["m1", "w2"], ["b"]), helper.make_node("Relu", ["m1"], ["y"])]
    g = helper.make_graph(nodes, "cycle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], weights)
    src, out = tmp_path / "cycle.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src))
    before = src.read_bytes()
    r = CliRunner().invoke(main, ["quant", str(src), str(out), "--min-elements", "16"])
    assert r.exit_code == 2 and "has a cycle" in r.output and "Traceback" not in r.output
    assert not out.exists() and src.read_bytes() == before
