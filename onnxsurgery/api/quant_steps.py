"""The steps `quant` is made of, shared by the real run, the dry run and the budget's probes:
the opset upgrade a plan needs (verified), the quant pipeline, onnxruntime's quantize_dynamic."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

import onnx

from ..errors import UnsupportedModelError, VerificationError, runtime_message
from ..storage.io import load_model, open_model
from ..storage.protos import graphs_everywhere
from ..storage.staging import save_model
from ..opset import adopt_upgrade, upgrade_opset
from ..upgrade_changes import moved_axes_only, same_computation
from ..pipeline import Workspace, open_workspace, quant_pipeline
from ..quantization.calibration import MIN_CHOICE_SAMPLES, Calibration, choice_samples
from ..quantization.options import QuantOptions
from ..quantization.request import QuantRequest
from ..quantization.plan_edits import derived_dtypes
from ..quantization.choices.plan_check import plan_opset
from ..quantization.choices.planning import any_weight_to_change, required_opset
from ..report import RunReport
from ..run_options import Inputs
from ..running.batched import batch_groups
from ..running.verify import compare_models

log = logging.getLogger("onnxsurgery")

# An upgraded model may differ from the original by float reassociation in a converted op: a
# few float32 rounding steps. A model computing in float16 or bfloat16 reassociates in that
# type: MiniLM in float16 moved by 9.6e-4 (relative L2) through the opset 21 upgrade alone.
UPGRADE_TOLERANCE = {onnx.TensorProto.FLOAT16: 4e-3, onnx.TensorProto.BFLOAT16: 3e-2}
UPGRADE_TOLERANCE_FLOAT32 = 1e-5


def upgrade_tolerance(model: onnx.ModelProto) -> float:
    """How far the upgraded model's outputs may move: by the narrowest float type it outputs or
    computes in (its weights' type: a float16 model with float32 inputs and outputs, as
    onnxconverter_common's keep_io_types writes it, moved by 9e-4 at opset 21 on MiniLM), Constant
    nodes' weights too (the float16 Guten OCR rec, every weight a Constant: 1.4e-4 at opset 13)."""
    types = {o.type.tensor_type.elem_type for o in model.graph.output} | \
        {t.data_type for t in model.graph.initializer} | \
        {a.t.data_type for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"}
    return max([UPGRADE_TOLERANCE[t] for t in types if t in UPGRADE_TOLERANCE], default=UPGRADE_TOLERANCE_FLOAT32)



def measured_activations(input_path, options: QuantOptions, inputs: Inputs) -> Calibration | None:
    """What auto's measured choices (lean or accurate, symmetric or not) read: each layer's
    input on the user's own inputs (`inputs.samples`, from --inputs), or nothing. Generated inputs
    rank the choices wrongly on real data (a random image is not text, random token ids are not
    a sentence: ddddocr's output error on rendered text went 0.0125 -> 0.0605 when its choices
    were measured on them), so without real inputs the choices are made from the weights alone.
    The budget's probes use it too, so that their int8 is the default's."""
    if choice_samples(inputs.samples) >= MIN_CHOICE_SAMPLES and (options.auto_scheme or options.auto_symmetric):
        return Calibration.for_choices(input_path, inputs.samples, shapes=inputs.shapes)
    return None


def decided_by(options: QuantOptions, samples, records=None) -> str | None:
    """The note saying what the per-weight choices were made from (None: nothing was chosen)."""
    if records is not None:
        return "every weight as the plan says"
    if not (options.auto_scheme or options.auto_symmetric):
        return None
    if samples and choice_samples(samples) < MIN_CHOICE_SAMPLES:
        return (f"per-weight choices made from the weights alone: {choice_samples(samples)} sample(s) from --inputs "
                f"are too few to tell a measured choice from rounding luck ({MIN_CHOICE_SAMPLES} or more)")
    if samples:
        return f"per-weight choices measured on {len(samples)} sample{'s' * (len(samples) != 1)} from --inputs"
    return "per-weight choices made from the weights alone (--inputs with real data: measured there)"


def run_quant_passes(ws: Workspace, options: QuantOptions, merge: bool,
                      calibration: Calibration | None = None, activations: Calibration | None = None,
                      records=None) -> None:
    ws.run_pipeline(quant_pipeline(options, merge=merge, opsets=ws.opsets, calibration=calibration,
                                   activations=activations, records=records, store=ws.store))


def needed_opset(ws: Workspace, options: QuantOptions, records=None) -> int:
    """The opset the quantization asks for: what a plan's records need, or the options' when
    they change any weight at all."""
    if records is not None:  # and a record whose fields are to be derived: what its dtype needs by default
        derived = derived_dtypes(ws.graph, records, ws.opsets.get("", 1))
        return max([plan_opset(records), *(required_opset(QuantOptions(dtype=d), ws.graph)
                                           for d in sorted(derived))])
    if not any_weight_to_change(ws.graph, options, ws.overridable):
        return 1
    return required_opset(options, ws.graph)


def at_required_opset(ws: Workspace, source, options: QuantOptions, report: RunReport, *, verify: bool,
                       inputs: Inputs | None = None, records=None, reference_runs: dict | None = None,
                       deferred: list | None = None) -> Workspace:
    """`ws`, or a workspace on the model upgraded to the opset the lowering needs (opset.py),
    checked in onnxruntime against the original first when `verify`. Where `auto` asked for the
    newer opset (4-bit weights; recurrent weights under the int8 default) and the upgrade fails,
    the model stays at its opset and the arith chain is used instead, with a note; an explicit
    `dq`, keep_quantized or a plan's records (`records`) refuse. `reference_runs`: the
    original's outputs, kept for the verification of the result (verify.compare_models).

    `deferred` (a list): the upgrade's own check is appended to it instead of run, for the
    caller to run only where the result's verified error is large, on the sample where it is
    largest (the check's argument: its index). The result's verification
    compares the original with the upgraded and quantized model, so it measures what the
    upgrade changed too; the upgrade's check on its own tells whether a large error is the
    converter's (refused) or the quantization's (a warning). Small models pay for each run of
    the model (a 1.2 MB conv net over 9 s of audio: 0.3 s a run, three runs 4-5x
    quantize_dynamic's time, bench/small_models.py), so it runs where it tells something."""
    inputs = inputs or Inputs()  # generated ones
    needed, current = needed_opset(ws, options, records), ws.opsets.get("", 1)
    if needed <= current or ws.template is None:
        return ws
    # From a file, the converter sees the model with its large payloads left in the file (what
    # open_model reads, references into it): it rewrites nodes, not weights, so the upgrade costs
    # the graph's bytes, not a copy or two of the model (a 359 MB encoder: 2.56 GB peak before).
    files = None
    if isinstance(source, (str, os.PathLike)):
        model, files, _ = open_model(source)
    else:
        model = ws.materialized(ws.template)
    try:
        upgraded = upgrade_opset(model, needed)
    except UnsupportedModelError as e:
        if options.lowering == "dq" or options.keep_quantized or records is not None:
            raise
        report.notes.append(f"{e}; kept opset {current}, so "
                            + ("4-bit weights use the arith chain" if options.four_bit else
                               "recurrent weights keep the arith chain, and Gemm weights the lean form"))
        if files is not None:
            files.close()
        return ws
    stamp_only = same_computation(model, upgraded)
    same_kernels = stamp_only or moved_axes_only(model, upgraded)
    # only the stamp changed (or axes moved to Constant inputs besides): the workspace's graph takes
    # it (opset.adopt_upgrade), not imported again; not where the template is the caller's own
    # ModelProto (quant in memory), which stays as given
    adopted = same_kernels and files is not None and \
        adopt_upgrade(ws.graph, ws.template, upgraded, moved_axes=not stamp_only)
    if not adopted:
        ws.close()
    del model
    note = f"upgraded opset {current} -> {needed} with onnx's version converter"
    if verify and stamp_only:
        note += ", verified with the result (it changed no node, only the version stamp)"
    elif verify and same_kernels:
        note += ", verified with the result (it changed no computation: axes attributes moved to Constant inputs)"
    elif verify and files is not None and deferred is not None:
        # its payloads are read where they are, from the input's folder: a copy of the graph
        # (references into the file, not weights) waits for the result's verification
        kept = onnx.ModelProto()
        kept.CopyFrom(upgraded)
        deferred.append(lambda worst: _check_upgrade(source, kept, needed, inputs, reference_runs, worst=worst))
        note += ", verified with the result (on its own where the result's error is large)"
    elif verify:
        check = _check_upgrade(source, upgraded, needed, inputs, reference_runs,
                               in_file=files is not None)
        note += f", verified in onnxruntime (max abs error {check['max_abs_error']:.3g})"
    report.notes.append(note)
    if adopted:
        if files is not None:
            files.close()
        return ws
    bytes_before = ws.input_bytes
    ws = open_workspace(upgraded, files=files)
    ws.input_bytes = bytes_before
    return ws


def _check_upgrade(source, upgraded: onnx.ModelProto, opset: int, inputs: Inputs, reference_runs,
                   in_file: bool = True, worst: int | None = None) -> dict:
    """The upgraded model against the original (compare_models' figures), refused
    (VerificationError) where it moves the outputs by more than float reassociation does.
    `in_file`: its payloads are still in `source`'s file (open_model's references). `worst`:
    the index of the sample where the result's error was largest, the one sample checked, its
    original's outputs taken from `reference_runs`. A converter that changes what a node
    computes shows there as on any other sample, and where the result's error is large is
    where the question "the converter's or the quantization's?" is asked: the 359 MB encoder's
    int4 with 16 samples ran the upgraded model 16 times for it, a third of the command's
    onnxruntime runs."""
    samples, reference_outputs = inputs.samples, None
    layout = inputs.samples is not None  # as the kept runs were computed (verify.compare_models)
    if worst is not None and reference_runs:
        (names, kept_samples, expected, batched, _), = reference_runs.values()
        # a sample run inside a batch (running/batched.py): that batch, as the original ran it, its
        # outputs taken; it was run again alone (dec-l4 int4: one more run over every weight)
        members = next(g for g in batch_groups(kept_samples) if worst in g) if batched else [worst]
        samples, reference_runs = [kept_samples[i] for i in members], None
        reference_outputs = (names, [expected[i] for i in members], batched)
    with tempfile.TemporaryDirectory() as tmp:
        if not in_file:
            path = Path(tmp) / "upgraded.onnx"
            save_model(upgraded, path)

        def compare(**how) -> dict:
            if in_file:
                return compare_models(source, upgraded, samples=samples, shapes=inputs.shapes, candidate_beside=source,
                                      layout=layout, **how)
            return compare_models(source, path, samples=samples, shapes=inputs.shapes, layout=layout, **how)

        check = compare(reference_runs=reference_runs, reference_outputs=reference_outputs)
        if not _within_reassociation(check, upgrade_tolerance(upgraded)):
            # onnxruntime fuses other patterns at another opset (an Erf-based Gelu at 14, not at
            # 21?): PP-OCRv6 det moved by 8.6e-4 with its optimizations on, by 0.0 with them off.
            # Only a difference that stays with them off is the converter's.
            check = compare(optimize=False)
    if not _within_reassociation(check, upgrade_tolerance(upgraded)):
        raise VerificationError(f"the model upgraded to opset {opset} computes other outputs than the input "
                                f"(relative L2 {check['rel_l2_error']:.3g}); nothing written")
    return check


def _within_reassociation(check: dict, tolerance: float) -> bool:
    """Each headline output within `tolerance` of the original's by relative L2."""
    return all(e["rel_l2_error"] <= tolerance for e in check["outputs"].values() if e.get("headline"))


# what quantize_dynamic writes where it quantizes a weight
_DYNAMIC_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM",
                "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention", "QGemm"}


def _dynamic_nodes(model: onnx.ModelProto) -> int:
    return sum(n.op_type in _DYNAMIC_OPS for g in graphs_everywhere(model.graph) for n in g.node)


def run_quantize_dynamic(ws: Workspace, notes: list | None = None) -> onnx.ModelProto:
    """onnxruntime's quantize_dynamic on the workspace's graph, through temporary files. Where it
    quantized nothing, a note says so in `notes` (chars2vec's LSTM kernels, passed into Loop bodies
    as loop-carried values, came back as they were, the file 0.1% larger, and nothing said it)."""
    from onnxruntime.quantization import quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        given = ws.finish()
        before = _dynamic_nodes(given)
        save_model(given, src, files=ws.files)
        del given  # not held while quantize_dynamic loads its own copy
        try:
            with _its_logging_to_ours():
                quantize_dynamic(str(src), str(dst), extra_options={"EnableSubgraph": True})
        except Exception as e:  # its own errors: report them in one line
            raise UnsupportedModelError(f"quantize_dynamic failed: {runtime_message(e)}") from e
        # Its output can list nodes out of order around subgraphs that read outer values;
        # one more pass through gs sorts them.
        written = load_model(dst)
        if notes is not None and _dynamic_nodes(written) <= before:
            notes.append("quantize_dynamic quantized no weight: the result computes as the input does (it "
                         "takes only initializers that a MatMul, Gemm, Conv or LSTM reads directly)")
        sorted_ws = open_workspace(written)
        return sorted_ws.materialized(sorted_ws.finish())


@contextlib.contextmanager
def _its_logging_to_ours():
    """onnxruntime.quantization logs on the root logger (`WARNING root: Please consider to run
    pre-processing ...`, with a URL): those lines go to onnxsurgery's logger at INFO instead
    (shown with -v), not to the user's terminal as warnings about a step they did not ask for."""
    def redirect(record: logging.LogRecord) -> bool:
        if "onnxruntime" not in record.pathname:
            return True
        log.info("quantize_dynamic: %s", record.getMessage())
        return False

    root = logging.getLogger()
    root.addFilter(redirect)
    try:
        yield
    finally:
        root.removeFilter(redirect)


def block_size_note(request: QuantRequest, records: list[dict]) -> str | None:
    """What --block-size N became where N does not divide a weight's blocked axis (issue 57, item
    10: `--block-size 7` gave blocks of 4 without a word): blocks must tile the axis, so the
    largest divisor between N/2 and N is used, or one scale per channel where there is none
    (quantization/choices/forms.py, choose_scheme)."""
    asked = request.block_size
    if asked is None or request.fp16 or request.levels:
        return None
    integer = [r for r in records if r.get("dtype") in ("int8", "uint8", "int4", "uint4")]
    used: dict[str, list[str]] = {}
    for r in integer:  # a weight per channel is a rule's choice, unless blocks were asked for
        if r.get("granularity") == "block" and r.get("block_size") != asked:
            axis = r["shape"][r["axis"]] if r.get("shape") and r.get("axis") is not None else None
            used.setdefault(f"blocks of {r['block_size']}", []).append(
                f"{r['name']} (axis of {axis})" if axis is not None else r["name"])
        elif r.get("granularity") == "channel" and request.granularity == "block":
            used.setdefault("one scale per channel", []).append(r["name"])
    if not used:
        return None
    said = "; ".join(f"{form} for {', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''}"
                     for form, names in used.items())
    return (f"--block-size {asked} does not divide every blocked axis, and blocks must tile it: {said} (the "
            f"largest divisor between {asked // 2 + 1} and {asked}, else one scale per channel)")
