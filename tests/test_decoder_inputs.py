"""Generated inputs that a decoder with a KV cache means: a non-empty past, an attention mask of
ones as long as past + new, position ids counting from the past, cache shapes from the graph
or from a config beside the model, so that verification runs where it failed before (every
dynamic dimension 32, masks of random 0-9)."""

from __future__ import annotations

import json

import numpy as np
import onnx
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import builders
import onnxsurgery
from onnxsurgery.cli import main
from onnxsurgery.running.feeds import PAST_LENGTH, make_inputs
from onnxsurgery.running.sessions import session

HEADS, HEAD = 2, 8


def _decoder(head_dims=(HEADS, HEAD)) -> onnx.ModelProto:
    """input_ids, attention_mask [b, past + s], position_ids, past_key [b, heads, past, head] ->
    one attention layer whose keys are the past's plus the new ones -> logits, present_key."""
    hidden = HEADS * HEAD
    v = lambda name, dims, t=TensorProto.FLOAT: helper.make_tensor_value_info(name, t, dims)  # noqa: E731
    c = lambda name, a: numpy_helper.from_array(np.asarray(a), name)  # noqa: E731
    nodes = [
        helper.make_node("Gather", ["E", "input_ids"], ["tok"]),
        helper.make_node("Gather", ["P", "position_ids"], ["pos"]),
        helper.make_node("Add", ["tok", "pos"], ["x"]),
        helper.make_node("MatMul", ["x", "Wk"], ["k0"]),
        helper.make_node("Reshape", ["k0", "split"], ["k1"]),
        helper.make_node("Transpose", ["k1"], ["k_new"], perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["past_key", "k_new"], ["present_key"], axis=2),
        helper.make_node("MatMul", ["x", "Wq"], ["q0"]),
        helper.make_node("Reshape", ["q0", "split"], ["q1"]),
        helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Cast", ["attention_mask"], ["m0"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m0", "axes"], ["m1"]),
        helper.make_node("Sub", ["one", "m1"], ["m2"]),
        helper.make_node("Mul", ["m2", "neg"], ["m3"]),
        helper.make_node("Add", ["scores", "m3"], ["masked"]),  # fails unless the mask is past + new long
        helper.make_node("Softmax", ["masked"], ["w"], axis=-1),
        helper.make_node("MatMul", ["w", "present_key"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", "merge"], ["ctx2"]),
        helper.make_node("MatMul", ["ctx2", "Wo"], ["logits"]),
    ]
    inits = [c("E", builders.rand((100, hidden), 1)), c("P", builders.rand((64, hidden), 2)),
             c("Wk", builders.rand((hidden, hidden), 3) * 0.3), c("Wq", builders.rand((hidden, hidden), 4) * 0.3),
             c("Wo", builders.rand((hidden, 100), 5) * 0.3), c("split", np.array([0, 0, HEADS, HEAD], np.int64)),
             c("merge", np.array([0, 0, hidden], np.int64)), c("axes", np.array([1, 2], np.int64)),
             c("one", np.array(1.0, np.float32)), c("neg", np.array(-1e4, np.float32))]
    inputs = [v("input_ids", ["batch_size", "sequence_length"], TensorProto.INT64),
              v("attention_mask", ["batch_size", "past_sequence_length + sequence_length"], TensorProto.INT64),
              v("position_ids", ["batch_size", "sequence_length"], TensorProto.INT64),
              v("past_key", ["batch_size", *head_dims[:1], "past_sequence_length", *head_dims[1:]])]
    outputs = [v("logits", ["batch_size", "sequence_length", 100]),
               v("present_key", ["batch_size", HEADS, "total_sequence_length", HEAD])]
    model = helper.make_model(helper.make_graph(nodes, "decoder", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_generated_inputs_follow_the_cache(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    feeds = make_inputs(session(tmp_path / "d.onnx"), model=tmp_path / "d.onnx")
    seq = feeds["input_ids"].shape[1]
    assert feeds["past_key"].shape == (1, HEADS, PAST_LENGTH, HEAD)
    assert feeds["attention_mask"].shape == (1, PAST_LENGTH + seq) and (feeds["attention_mask"] == 1).all()
    assert feeds["position_ids"].tolist() == [list(range(PAST_LENGTH, PAST_LENGTH + seq))]
    assert feeds["input_ids"].max() < 100  # inside the vocabulary


def test_cache_head_sizes_left_dynamic_come_from_a_config_beside_the_model(tmp_path):
    onnx.save(_decoder(head_dims=("num_heads", "head_size")), str(tmp_path / "d.onnx"))
    (tmp_path / "genai_config.json").write_text(json.dumps(
        {"model": {"decoder": {"num_key_value_heads": HEADS, "head_size": HEAD}}}))
    feeds = make_inputs(session(tmp_path / "d.onnx"), model=tmp_path / "d.onnx")
    assert feeds["past_key"].shape == (1, HEADS, PAST_LENGTH, HEAD)


def test_quant_and_shrink_verify_a_decoder_on_generated_inputs(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128)
    assert report.pass_report("quantize").changed >= 3 and report.verification["rel_l2_error"] < 0.05
    r = CliRunner().invoke(main, ["shrink", str(tmp_path / "d.onnx"), str(tmp_path / "s.onnx"), "--verify"])
    assert r.exit_code == 0, r.output


def test_the_headline_is_the_models_outputs_not_its_cache(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    report = onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128)
    v = report.verification
    assert v["headline"] == ["logits"] and v["rel_l2_error"] == v["outputs"]["logits"]["rel_l2_error"]
    assert "argmax_agreement" not in v["outputs"]["present_key"]  # a head's features, not classes
    chosen = onnxsurgery.compare(tmp_path / "d.onnx", tmp_path / "q.onnx", outputs=("present_key",))
    assert chosen["headline"] == ["present_key"]
    r = CliRunner().invoke(main, ["compare", str(tmp_path / "d.onnx"), str(tmp_path / "q.onnx"), "--outputs", "nope"])
    assert r.exit_code == 2 and "--outputs names 'nope', which the model does not output" in r.output


def test_shrink_verifies_on_given_inputs(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    feeds = make_inputs(session(tmp_path / "d.onnx"), model=tmp_path / "d.onnx")
    np.savez(tmp_path / "in.npz", **feeds)
    r = CliRunner().invoke(main, ["shrink", str(tmp_path / "d.onnx"), str(tmp_path / "s.onnx"), "--verify",
                                  "--inputs", str(tmp_path / "in.npz"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["verification"]["exact"]
    r = CliRunner().invoke(main, ["shrink", str(tmp_path / "d.onnx"), str(tmp_path / "s.onnx"), "--shape", "x:1x2"])
    assert r.exit_code == 2 and "add --verify" in r.output


def test_reports_say_when_their_inputs_were_generated(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    r = CliRunner().invoke(main, ["-q", "quant", str(tmp_path / "d.onnx"), str(tmp_path / "q.onnx"),
                                  "--min-elements", "128"])
    # batch 1, and batch 2 where the batch is dynamic: a rewrite can break what only another size exercises;
    # and a decoder's first step, its past empty
    assert r.exit_code == 0 and "verification (3 generated samples;" in r.output, r.output
    feeds = make_inputs(session(tmp_path / "d.onnx"), model=tmp_path / "d.onnx")
    np.savez(tmp_path / "in.npz", **feeds)
    np.savez(tmp_path / "bad.npz", ids=feeds["input_ids"])
    r = CliRunner().invoke(main, ["-q", "quant", str(tmp_path / "d.onnx"), str(tmp_path / "q.onnx"),
                                  "--min-elements", "128", "--inputs", str(tmp_path / "in.npz")])
    assert r.exit_code == 0 and "verification (1 sample;" in r.output, r.output
    r = CliRunner().invoke(main, ["-q", "quant", str(tmp_path / "d.onnx"), str(tmp_path / "q.onnx"),
                                  "--calibration", str(tmp_path / "bad.npz")])
    assert r.exit_code == 2 and "--calibration has 'ids', which" in r.output, r.output


def test_argmax_agreement_counts_positions_not_samples(tmp_path):
    """A decoder's samples are a prompt (many positions) and one-token steps: agreement is pooled
    over positions, so a step that flips counts as one position (9 of 10 agree), not as half the
    samples (the mean of per-sample figures would say 50%)."""
    from onnxsurgery.running.verify import compare_models

    def model(path, shift):
        nodes = [helper.make_node("Add", ["x", "shift"], ["y"])]
        inits = [numpy_helper.from_array(np.array(shift, np.float32), "shift")]
        onnx.save(builders.model(nodes, [builders.vi("x", shape=[1, "positions", 4])],
                                 [builders.vi("y", shape=[1, "positions", 4])], inits), str(path))
        return path

    a, b = model(tmp_path / "a.onnx", [0, 0, 0, 0]), model(tmp_path / "b.onnx", [0, 0.5, 0, 0])
    prompt = np.zeros((1, 9, 4), np.float32)
    prompt[..., 0] = 10  # class 0 by far: the shift does not flip it
    step = np.array([[[1, 0.8, 0, 0]]], np.float32)  # class 0 by 0.2: the shift flips it to 1
    result = compare_models(a, b, samples=[{"x": prompt}, {"x": step}])
    assert abs(result["outputs"]["y"]["argmax_agreement"] - 0.9) < 1e-12


def test_generated_ids_span_a_tied_table_read_through_a_transpose(tmp_path):
    """The genai builder stores a tied table as the lm_head's [hidden, vocab] B and gathers the
    token rows from its Transpose: generated ids span the vocabulary there too (below 10 they
    were SmolLM2's special tokens alone, a sequence no text has), and so they do behind the
    GatherBlockQuantized of a quantized one."""
    from test_tied_table import VOCAB, _tied_model

    onnx.save(_tied_model("mirrored"), str(tmp_path / "tied.onnx"))
    feeds = make_inputs(session(tmp_path / "tied.onnx"), model=tmp_path / "tied.onnx", seed=0)
    assert 10 <= feeds["ids"].max() < VOCAB
    onnxsurgery.quant_file(tmp_path / "tied.onnx", tmp_path / "q.onnx", target="onnxruntime", dtype="int4",
                           min_elements=1024, verify=False)
    assert "GatherBlockQuantized" in {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    feeds = make_inputs(session(tmp_path / "q.onnx"), model=tmp_path / "q.onnx", seed=0)
    assert 10 <= feeds["ids"].max() < VOCAB
