"""A chain of layers cut into stages (running/stages.py, issue 58's lockstep idea): the stages,
run one after the other over the same data file, compute bit for bit what the whole graph does,
and a corrupted byte in a late stage's weight shows in what they compute."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import builders
from onnxsurgery.running import runs
from onnxsurgery.running.stages import run_stages, split_stages, stage_cuts

LAYERS, HIDDEN, VOCAB = 4, 32, 50


def _chain() -> onnx.ModelProto:
    """Token ids -> embedding -> LAYERS x (MatMul, Tanh, residual Add, a present output per layer)
    -> a head MatMul: a decoder's shape, its weights in the graph's order."""
    nodes = [helper.make_node("Gather", ["E", "ids"], ["h0"])]
    inits = [numpy_helper.from_array(builders.rand((VOCAB, HIDDEN), 1), "E")]
    outputs = []
    for i in range(LAYERS):
        nodes += [helper.make_node("MatMul", [f"h{i}", f"W{i}"], [f"m{i}"]),
                  helper.make_node("Tanh", [f"m{i}"], [f"present.{i}"]),
                  helper.make_node("Add", [f"h{i}", f"present.{i}"], [f"h{i + 1}"])]
        inits.append(numpy_helper.from_array(builders.rand((HIDDEN, HIDDEN), 10 + i) * 0.3, f"W{i}"))
        outputs.append(helper.make_tensor_value_info(f"present.{i}", TensorProto.FLOAT, ["b", "s", HIDDEN]))
    nodes.append(helper.make_node("MatMul", [f"h{LAYERS}", "H"], ["logits"]))
    inits.append(numpy_helper.from_array(builders.rand((HIDDEN, VOCAB), 99) * 0.3, "H"))
    return builders.model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", "s"])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", VOCAB]), *outputs],
                          inits)


@pytest.fixture
def chain_file(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(_chain(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="chain.onnx.data", size_threshold=0)
    return path


def _stub(path):
    return onnx.load(str(path), load_external_data=False)


def _streamed(model, beside):
    return runs.open_session(model, payloads_beside=beside, streamed=True, fold_constants=False)


def _outputs(path):
    names = [o.name for o in _stub(path).graph.output]
    feeds = {"ids": np.array([[1, 7, 3], [4, 0, 49]], np.int64)}
    return names, feeds


def test_the_stages_compute_what_the_whole_graph_does(chain_file):
    stub = _stub(chain_file)
    cuts = stage_cuts(stub, 3)
    stages = split_stages(stub, cuts)
    assert len(stages) == 3 and len(cuts) == 2
    # cut between layers: the hidden state crosses (and no layer's insides)
    assert all(len(s.inputs) == 1 for s in stages[1:]), [s.inputs for s in stages]
    assert sum(s.payload_bytes for s in stages) == sum(
        int(e.value) for t in stub.graph.initializer for e in t.external_data if e.key == "length")
    names, feeds = _outputs(chain_file)
    whole = runs.run(_streamed(stub, chain_file), names, feeds)
    opened = []
    staged = run_stages(stages, lambda m: _streamed(m, chain_file), runs.run, feeds, names, ready=opened.append)
    assert opened == [0, 1, 2]
    for a, b in zip(whole, staged):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_a_corrupted_byte_in_a_late_stage_shows(chain_file):
    stub = _stub(chain_file)
    stages = split_stages(stub, stage_cuts(stub, 3))
    names, feeds = _outputs(chain_file)
    intact = runs.run(_streamed(stub, chain_file), names, feeds)
    late = stages[-1].model.graph.initializer[-1]  # the head: read by the last stage alone
    assert late.name == "H"
    offset = next(int(e.value) for e in late.external_data if e.key == "offset")
    data = chain_file.parent / "chain.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[offset + 5] ^= 0x40  # a bit of one float's exponent
    data.write_bytes(bytes(raw))
    staged = dict(zip(names, run_stages(stages, lambda m: _streamed(m, chain_file), runs.run, feeds, names)))
    intact = dict(zip(names, intact))
    assert not np.array_equal(staged["logits"], intact["logits"])
    for i in range(LAYERS):  # the earlier stages read nothing changed
        assert np.array_equal(staged[f"present.{i}"], intact[f"present.{i}"])


def test_a_subgraph_is_not_cut():
    with pytest.raises(ValueError, match="subgraph"):
        split_stages(builders.if_and_loop_subgraphs(), [1])
