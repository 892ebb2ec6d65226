"""`quant --target-error` / `--target-size`: each weight stored as int4, int8, float16 or float32,
by its output error in each format measured alone in onnxruntime (quantization/choices/allocation.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from ..staging import save_model
from ..pipeline import open_workspace
from ..progress import progress
from ..quantization.choices import allocation
from ..quantization.calibration import Calibration
from ..quantization.options import QuantOptions
from ..report import RunReport
from ..run_options import Inputs
from ..verify import compare_models
from .quant_steps import _activations, _at_required_opset, _run_quant_passes

ALLOCATION_ROUNDS = 4


def _literal(name: str) -> str:
    """A glob pattern matching exactly `name`."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _allocate(input_path, options: QuantOptions, merge: bool, *, target_error: float | None,
              target_size: int | None, samples=None, shapes=None,
              calibration: Calibration | None = None) -> tuple[QuantOptions, allocation.Allocation, float]:
    """Options that store each weight as int4, int8 (`options.dtype`, or int8 when that is 4-bit),
    float16 or float32 so as to meet `target_error` at the smallest size, or `target_size`
    (bytes of the whole file) at the smallest error (quantization/choices/allocation.py). Each weight's error
    per integer format is measured alone in onnxruntime; an allocation for an error whose verified
    error falls short is tightened and made again (at most ALLOCATION_ROUNDS times). Returns the
    options, the allocation and its verified output error."""

    from ..graph_utils import collect_constants, iter_scopes

    eight_bit = options if not options.four_bit else options.changed(
        dtype="uint8" if options.dtype.startswith("u") else "int8")
    base = eight_bit.changed(int4_for=(), fp16_for=())

    def measured(opts: QuantOptions) -> tuple[float, int, int, list[str]]:
        """(output error, file bytes, bytes the quantizer saved, weights quantized), at the opset
        the final run will have (4-bit weights: 21, with float32 scales)."""
        ws = _at_required_opset(open_workspace(input_path), input_path, opts, RunReport("quant", str(input_path)),
                                verify=False)
        _run_quant_passes(ws, opts, merge, calibration, _activations(input_path, opts, Inputs(samples, shapes)))
        quantize = ws.reports[-1]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "probe.onnx"
            save_model(ws.export(), path, files=ws.files)
            err = compare_models(input_path, path, samples=samples, shapes=shapes,
                                 fold_candidate=False)["rel_l2_error"]
            size = path.stat().st_size
        ws.close()
        return err, size, quantize.bytes_saved, quantize.details["quantized"]

    full_error, full_size, _, names = measured(base)
    ws = open_workspace(input_path)
    sites = {site.name: site for site in collect_constants(ws.graph, list(iter_scopes(ws.graph)))}
    weights, stored_int8 = [], 0
    for name in progress(names, "measure each weight alone", unit="weight"):
        site, only = sites[name], (_literal(name),)
        costs = allocation.WeightCosts(name, {"float32" if site.onnx_dtype == onnx.TensorProto.FLOAT else "kept":
                                              site.nbytes})
        if site.onnx_dtype == onnx.TensorProto.FLOAT:
            costs.bytes["float16"] = 2 * site.num_elements
        for fmt, opts in (("int8", base.changed(include=only)),
                          ("int4", base.changed(include=only, int4_for=only))):
            err, _, saved, done = measured(opts)
            if done:
                costs.bytes[fmt], costs.error[fmt] = site.nbytes - saved, err
        stored_int8 += costs.bytes.get("int8", site.nbytes)
        weights.append(costs)
    ws.close()
    others = full_size - stored_int8  # the graph and what stays float, as the all-int8 file stores it

    def options_for(allocated: allocation.Allocation) -> QuantOptions:
        return base.changed(
            int4_for=tuple(_literal(n) for n in allocated.names("int4")),
            fp16_for=tuple(options.fp16_for) + tuple(_literal(n) for n in allocated.names("float16")),
            exclude=tuple(options.exclude)
            + tuple(_literal(n) for n in allocated.names("float32") + allocated.names("kept")))

    if target_size is not None:
        room = target_size - others
        for _ in range(ALLOCATION_ROUNDS):  # sizes measured alone add up to within a few %: refit
            allocated = allocation.for_size(weights, room)
            err, size, *_ = measured(options_for(allocated))
            if size <= target_size:
                break
            room -= size - target_size
        if full_size <= target_size and full_error <= err:  # errors need not add up as planned
            allocated, err = allocation.uniform(weights, "int8"), full_error
        return options_for(allocated), allocated, err
    goal = target_error
    for _ in range(ALLOCATION_ROUNDS):
        allocated = allocation.for_error(weights, goal)
        err = measured(options_for(allocated))[0]
        if err <= target_error or allocated.predicted_error == 0:
            break
        goal = allocated.predicted_error * target_error / err  # the prediction fell short by err / predicted
    return options_for(allocated), allocated, err
