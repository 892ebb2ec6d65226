"""`info`, `report`, `check` and `compare`: commands that look at models and write none
(api/inspecting.py, api/check.py, html_report.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..defaults import METHOD_KEYS
from ..render import render_info, render_report_summary, render_verification
from ..run_options import Inputs
from .common import handle_errors, model_argument, model_or_folder_argument, models_of
from .options import declared_options, group_from


@click.command(short_help="Where the bytes are, and what each command saves.")
@click.argument("path", type=str, callback=model_or_folder_argument)
@click.option("--min-bytes", type=click.IntRange(min=0), default=1024, show_default=True,
              help="List constants of at least this many bytes.")
@click.option("--top", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rows to print per table (0: all). --json always has all.")
@click.option("--json", "as_json", is_flag=True, help="Print the inventory as JSON.")
@handle_errors
def info(path, min_bytes, top, as_json):
    """Show where the bytes are and what each method would save. Writes nothing. PATH may be a
    model folder: each of its models (as `quant` and `shrink` take them)."""
    from .. import api

    models = models_of(path)
    found = {model: api.info(model, min_bytes=min_bytes) for model in models}
    if as_json:
        click.echo(json.dumps(found[path] if models == [path] else found, indent=2))
    else:
        click.echo("\n\n".join(render_info(model, data, top=top) for model, data in found.items()))


@click.command(short_help="One HTML page measuring every method.")
@click.argument("model", callback=model_argument)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="The HTML file [default: MODEL without .onnx, plus .report.html].")
@click.option("--methods", default=",".join(METHOD_KEYS), show_default=True,
              help="Comma-separated methods to make and measure.")
@click.option("--min-bytes", type=click.IntRange(min=0), default=1024, show_default=True,
              help="Draw constants of at least this many bytes as their own boxes.")
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False), metavar="FILE",
              help="Real inputs (.npz) [default: generated].")
@click.option("--shape", "shapes", multiple=True, metavar="NAME:DxD", help="Fix a generated input's shape. Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the page's figures as JSON.")
@handle_errors
def report(model, output, methods, min_bytes, inputs_npz, shapes, as_json):
    """Write one HTML page (self-contained, no network) to look at before shipping: where the
    bytes are, and for each method its file size (raw, gzip, brotli), output error, latency and
    memory after session creation, measured here by making each file. Takes a few times as long
    as one `quant`."""
    from ..running.feeds import parse_shapes
    from ..running.samples import load_input_samples
    from ..html_report import report_file

    out = Path(output) if output else Path(model).with_name(Path(model).stem + ".report.html")
    data = report_file(model, out, methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
                       samples=load_input_samples(inputs_npz) if inputs_npz else None,
                       shapes=parse_shapes(shapes), inputs_file=inputs_npz, shape_specs=tuple(shapes),
                       min_bytes=min_bytes)
    click.echo(json.dumps(data, indent=2) if as_json else render_report_summary(model, str(out), data))


@click.command(short_help="What TensorRT's parser would refuse.")
@click.argument("model", callback=model_or_folder_argument)
@click.option("--target", type=click.Choice(["tensorrt"]), default="tensorrt", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@handle_errors
def check(model, target, as_json):
    """Check MODEL statically against what the target's parser takes (tensorrt: onnx-tensorrt's
    operator list for one TensorRT release, checked into onnxsurgery with its date): each op,
    its data type, and the attributes and constant inputs the list restricts; and the rules
    TensorRT's documentation states for quantized weights ("Working with Quantized Types",
    "Quantization Schemes", TensorRT 10.x: symmetric, positive scales, INT4 in blocks of 64 or
    128 along the last or second-to-last dimension, opset 21 for blocks, one DequantizeLinear per
    reader). One line per finding, naming its page, then what to do next; exit code 1 when there
    is any. MODEL may be a model folder: each of its models. No TensorRT needed, and no
    substitute for a real engine build."""
    from .. import api

    models = models_of(model)
    results = {m: api.check_file(m, target=target) for m in models}
    if as_json:
        click.echo(json.dumps(results[model] if models == [model] else results, indent=2))
    else:
        for name, result in results.items():
            for finding in result["refused"]:
                click.echo(f"{name}: {finding}")
            click.echo(f"{name}: {len(result['refused'])} finding{'s' * (len(result['refused']) != 1)} against "
                       f"{result['target']} (onnx-tensorrt's operator list, retrieved {result['retrieved']}) and the "
                       f"quantization rules of {result['rules'][0]}")
            if result.get("next"):
                click.echo(f"{name}: next: {result['next']}")
    if any(r["refused"] for r in results.values()):
        sys.exit(1)


@click.command(short_help="Compare two models' outputs.")
@click.argument("reference", metavar="A", callback=model_argument)
@click.argument("candidate", metavar="B", callback=model_argument)
@declared_options(Inputs)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@handle_errors
def compare(reference, candidate, as_json, **groups):
    """Run A and B in onnxruntime on the same inputs and compare their outputs.

    A model written by `npy` runs with its .npy arrays, as `run` runs it."""
    from .. import api

    inputs = group_from(Inputs, groups)
    result = api.compare(reference, candidate, samples=inputs.samples, shapes=inputs.shapes, outputs=inputs.outputs)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"{reference} vs {candidate}: " + ("identical outputs" if result["exact"] else "outputs differ"))
        for side, name in (("reference", reference), ("candidate", candidate)):
            if side in result.get("npy_arrays", {}):
                click.echo(f"  {name}: its {result['npy_arrays'][side]} .npy arrays given as initializers, as `run` "
                           "gives them")
        click.echo(render_verification(result))
