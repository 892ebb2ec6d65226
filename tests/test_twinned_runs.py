"""A streamed decoder's result runs its samples with a past and its first steps in one run of a
twinned session (running/twinned.py): each weight dequantized once, not once per batch, and
the same figures as two runs (issue 58: verified at most 1.15x --no-verify)."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest

import onnxsurgery
from onnxsurgery.errors import VerificationError
from onnxsurgery.running import runs as seam, sessions, stream_size, verify
from onnxsurgery.running.feeds import make_inputs
from onnxsurgery.running.twinned import joined_feeds, outputs_of, split_outputs, twin_graph
from test_decoder_inputs import _decoder


@pytest.fixture
def streamed_everything(monkeypatch):
    monkeypatch.setattr(stream_size, "STREAM_BYTES", 1)


def _recorded_runs(monkeypatch) -> list[bool]:
    """Whether each run through the seam was a twinned one, in order."""
    real, seen = seam.run, []

    def recorded(sess, names, feeds):
        seen.append(any(name.endswith("__twin1") for name in feeds))
        return real(sess, names, feeds)

    monkeypatch.setattr(seam, "run", recorded)
    return seen


def _twins_refused(monkeypatch) -> None:
    real = seam.open_session

    def refusing(model, **options):
        if options.get("twins", 1) > 1:
            raise VerificationError("no twins (made by hand)")
        return real(model, **options)

    monkeypatch.setattr(seam, "open_session", refusing)


def test_the_result_runs_once_and_reports_what_two_runs_did(tmp_path, streamed_everything, monkeypatch):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128, verify=False)
    seen = _recorded_runs(monkeypatch)
    once = verify.compare_models(tmp_path / "d.onnx", tmp_path / "q.onnx", fold_candidate=False)
    # the reference: its first steps and its samples on the pasts those made, one chained run
    # (chained.py); the result: one twinned run
    assert once["streamed"] and once["samples"] == 4 and seen == [True, True]
    seen.clear()
    _twins_refused(monkeypatch)
    twice = verify.compare_models(tmp_path / "d.onnx", tmp_path / "q.onnx", fold_candidate=False)
    assert sorted(seen) == [False, False, False]  # the reference's, then the result's two batches
    for key in ("rel_l2_error", "max_abs_error", "samples", "worst_sample"):
        assert once[key] == twice[key]
    assert once["rel_l2_error"] > 0


def test_a_copy_still_compares_exact(tmp_path, streamed_everything, monkeypatch):
    """Each copy runs the kernels a run of its own would: a lossless rewrite compares bit-identical."""
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    shutil.copy(tmp_path / "d.onnx", tmp_path / "copy.onnx")
    seen = _recorded_runs(monkeypatch)
    result = verify.compare_models(tmp_path / "d.onnx", tmp_path / "copy.onnx", fold_candidate=False)
    assert result["exact"] and seen == [True, True]


def test_twin_graph_shares_what_reads_constants_alone(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128, verify=False)
    model = onnx.load(str(tmp_path / "q.onnx"))
    casts = sum(n.op_type in ("Cast", "DequantizeLinear") and n.input[0].endswith("_q") for n in model.graph.node)
    twinned = twin_graph(onnx.load(str(tmp_path / "q.onnx")))
    assert casts and sum(n.op_type in ("Cast", "DequantizeLinear") and n.input[0].endswith("_q")
                         for n in twinned.graph.node) == casts  # each weight dequantized once
    # a weight's dequantization lies right before its first reader: freed once both copies read it
    order = [n.output[0] for n in twinned.graph.node]
    for node in twinned.graph.node:
        if node.op_type in ("Cast", "DequantizeLinear") and node.input[0].endswith("_q"):
            reader = next(i for i, n in enumerate(twinned.graph.node) if node.output[0] in n.input)
            assert order.index(node.output[0]) == reader - 1
    dims = {d.dim_param for i in twinned.graph.input for d in i.type.tensor_type.shape.dim}
    assert "batch_size" in dims and "batch_size__twin1" in dims
    _same_as_runs_of_their_own(tmp_path / "q.onnx")


def test_twins_are_made_of_mapped_files_only(tmp_path):
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    with pytest.raises(VerificationError):
        sessions.session(onnx.load(str(tmp_path / "d.onnx")), twins=2)


def test_a_graph_with_subgraphs_runs_side_by_side_as_before(tmp_path):
    import builders

    with pytest.raises(ValueError, match="subgraph"):
        twin_graph(builders.if_and_loop_subgraphs())


def test_weights_dequantized_by_dequantizelinear_run_side_by_side(tmp_path):
    """int4's DequantizeLinear in blocks held more twinned than in two runs where both copies read
    the weight (twinned.py): here the token and position tables, which Gathers read."""
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128, verify=False,
                           dtype="int4", lowering="dq")
    model = onnx.load(str(tmp_path / "q.onnx"))
    assert any(n.op_type == "DequantizeLinear" and n.input[0] == "E_q" for n in model.graph.node)
    with pytest.raises(ValueError, match="DequantizeLinear"):
        twin_graph(model)


def test_a_weight_dequantized_for_one_joined_matmul_twins(tmp_path):
    """A DequantizeLinear whose only reader is a MatMul, joined across the copies (joined.py), is
    read once: such a model twins, each weight packed once, and each copy computes what a run of
    its own does, bit for bit."""
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128, verify=False,
                           dtype="int4", lowering="dq", exclude=["E", "P"])
    model = onnx.load(str(tmp_path / "q.onnx"))
    weights = [n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert weights
    twinned = twin_graph(onnx.load(str(tmp_path / "q.onnx")))
    readers = [n for n in twinned.graph.node if set(n.input) & set(weights)]
    assert len(readers) == len(weights) and all(n.op_type == "MatMul" for n in readers)
    assert sum(n.op_type == "MatMul" for n in twinned.graph.node) == len(weights) + 2 * 2  # attention's, twice
    _same_as_runs_of_their_own(tmp_path / "q.onnx")


def _same_as_runs_of_their_own(path) -> None:
    plain = sessions.session(path, fold_constants=False, streamed=True)
    names = [o.name for o in plain.get_outputs()]
    feeds = [make_inputs(plain, model=path, batch=3, length=5),
             make_inputs(plain, model=path, batch=2, length=3, past_length=0)]
    both = sessions.session(path, fold_constants=False, streamed=True, twins=2)
    got = split_outputs(both.run(outputs_of(names, 2), joined_feeds(feeds)), 2)
    for f, outputs in zip(feeds, got):
        for want, have in zip(plain.run(names, f), outputs):
            np.testing.assert_array_equal(want, have)


def test_a_chain_feeds_the_second_copy_from_the_first(tmp_path):
    """chained.py's session: the second copy's past is the first copy's present, no feed of its own."""
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    chained = twin_graph(onnx.load(str(tmp_path / "d.onnx")), chain={"past_key": "present_key"})
    assert "past_key__twin1" not in {i.name for i in chained.graph.input}
    assert any("present_key" in n.input for n in chained.graph.node if n.output[0].endswith("__twin1"))
    with pytest.raises(ValueError, match="no graph input"):
        twin_graph(onnx.load(str(tmp_path / "d.onnx")), chain={"E": "present_key"})


def test_the_reference_runs_once_and_computes_what_two_runs_did(tmp_path, streamed_everything, monkeypatch):
    """A streamed decoder's reference: its first steps and its steps on their pasts in one chained
    run (chained.py), the same samples and outputs, bit for bit, as its two runs."""
    from onnxsurgery.running import reference_runs

    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    seen = _recorded_runs(monkeypatch)
    once = reference_runs.run_reference(tmp_path / "d.onnx", None, None, 0, True)
    assert seen == [True]
    seen.clear()
    _twins_refused(monkeypatch)
    twice = reference_runs.run_reference(tmp_path / "d.onnx", None, None, 0, True)
    assert seen == [False]  # the samples' run; the prefixes' run goes straight to the session (generated.py)
    assert once[0] == twice[0] and once[3:] == twice[3:] and len(once[1]) == len(twice[1]) == 4
    for a, b in zip(once[1], twice[1]):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    for a, b in zip(once[2], twice[2]):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_streamed_decoders_samples_are_short_and_cover_every_kind_of_step(tmp_path, streamed_everything):
    """The lead's decision (issue 58): a streamed decoder's generated samples are DECODER_LENGTH new
    tokens on a past of DECODER_PAST, still at batch 1 and 2, with a past and without one (the
    first steps, of DECODER_PAST tokens); a model without a past keeps LENGTHS[0]."""
    from onnxsurgery.running import reference_runs
    from onnxsurgery.running.feeds import LENGTHS

    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    names, samples, expected, merge, _ = reference_runs.run_reference(tmp_path / "d.onnx", None, None, 0, True)
    kinds = sorted((s["input_ids"].shape[0], s["past_key"].shape[2]) for s in samples)
    past = reference_runs.DECODER_PAST
    assert merge and kinds == [(1, 0), (1, past), (2, 0), (2, past)]
    assert {s["input_ids"].shape[1] for s in samples if s["past_key"].shape[2]} == {reference_runs.DECODER_LENGTH}
    assert {s["input_ids"].shape[1] for s in samples if not s["past_key"].shape[2]} == {past}
    assert reference_runs.DECODER_LENGTH < LENGTHS[0]
    assert all(np.isfinite(o).all() for outputs in expected for o in outputs)


def test_given_samples_of_other_shapes_run_once_on_each_side(tmp_path, streamed_everything, monkeypatch):
    """The user's samples of two shapes (--inputs) on a streamed model: the reference's batches in
    one twinned run too, as the result's, each weight read once per model; the figures of one
    run per batch, bit for bit."""
    onnx.save(_decoder(), str(tmp_path / "d.onnx"))
    onnxsurgery.quant_file(tmp_path / "d.onnx", tmp_path / "q.onnx", min_elements=128, verify=False)
    plain = sessions.session(tmp_path / "d.onnx")
    samples = [make_inputs(plain, model=tmp_path / "d.onnx", batch=1, length=5, seed=1),
               make_inputs(plain, model=tmp_path / "d.onnx", batch=2, length=3, seed=2)]
    seen = _recorded_runs(monkeypatch)
    once = verify.compare_models(tmp_path / "d.onnx", tmp_path / "q.onnx", samples=samples, fold_candidate=False)
    assert once["streamed"] and seen == [True, True]
    seen.clear()
    _twins_refused(monkeypatch)
    twice = verify.compare_models(tmp_path / "d.onnx", tmp_path / "q.onnx", samples=samples, fold_candidate=False)
    assert seen == [False] * 4
    for key in ("rel_l2_error", "max_abs_error", "samples", "worst_sample"):
        assert once[key] == twice[key]
