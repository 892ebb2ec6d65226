"""Command line: a thin click layer. Each command parses options, calls one API function (imported
then, so that --help loads no onnx, onnxruntime or quantizer: its defaults are in defaults.py) and
renders its report. Library errors become one line on stderr and exit code 2."""

from __future__ import annotations

import functools
import json
import logging
import sys
from pathlib import Path

import click

from . import progress
from .defaults import MERGE_MIN_ELEMENTS
from .defaults import METHOD_KEYS
from .cli_options import (CHECKS, OUTPUT, STORE, WEIGHTS, GroupedCommand, headline_option, option, request_from,
                          request_options, verification_options, where_options)
from .errors import OnnxSurgeryError, OptionError, OutputError
from .render import render_info, render_report_summary, render_run, render_verification

EXIT_ERROR = 2
EXIT_INTERNAL = 3


def _one_line(message: str) -> str:
    """A message on one line: names from a damaged file may hold newlines or control bytes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def _handle_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = kwargs.pop("debug", False)
        ctx = click.get_current_context(silent=True)
        quiet = bool(ctx and (ctx.find_root().obj or {}).get("quiet"))
        progress.enable(progress.wanted(quiet, bool(kwargs.get("as_json"))))
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except OnnxSurgeryError as e:
            click.echo(f"onnxsurgery: error: {_one_line(str(e))}", err=True)
            sys.exit(EXIT_ERROR)
        except MemoryError:
            click.echo("onnxsurgery: error: out of memory", err=True)
            sys.exit(EXIT_ERROR)
        except Exception as e:  # a bug: still one line, unless --debug asks for the traceback
            if debug:
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            click.echo(f"onnxsurgery: internal error: {type(e).__name__}: {first} "
                       "(rerun with --debug for the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)

    return click.option("--debug", is_flag=True, hidden=True)(wrapper)


def _model_path(ctx, param, value):
    """A click callback for a MODEL argument: a folder or a missing path refused in one line,
    the same words for every command (api._common.model_file)."""
    from .api._common import model_file

    for path in (value if isinstance(value, tuple) else (value,)):
        if path is not None:
            try:
                model_file(path)
            except OnnxSurgeryError as e:
                click.echo(f"onnxsurgery: error: {_one_line(str(e))}", err=True)
                ctx.exit(EXIT_ERROR)
    return value


def _refuse_same_file(src, dst, in_place: bool) -> None:
    """The output is the input: refused in the CLI's words (the API says in_place=True)."""
    try:
        same = not in_place and Path(dst).resolve() == Path(src).resolve()
    except OSError:
        same = False
    if same:
        raise OutputError(f"output is the input file ({dst}); pass --in-place to overwrite it")


def _outputs_for(inputs: tuple[str, ...], output: str) -> list[tuple[Path, Path]]:
    """Pair inputs with outputs like `cp`: one input to a file or folder, many to a folder."""
    out = Path(output)
    if len(inputs) > 1 or output.endswith(("/", "\\")):
        if not out.is_dir():
            raise OutputError(f"with several inputs, the output must be an existing folder: {out}")
        names = [Path(i).name for i in inputs]
        if len(set(names)) != len(names):
            raise OutputError("two inputs share a file name; they would overwrite each other")
        return [(Path(i), out / Path(i).name) for i in inputs]
    if out.is_dir():
        return [(Path(inputs[0]), out / Path(inputs[0]).name)]
    return [(Path(inputs[0]), out)]


def _common_output_options(fn):
    fn = option("--json", "as_json", is_flag=True, group=OUTPUT, help="Print the report as JSON.")(fn)
    fn = option("--external-data/--one-file", default=None, group=OUTPUT,
                help="Weights in OUTPUT.data or in the .onnx.")(fn)
    fn = option("--in-place", is_flag=True, group=OUTPUT, help="Allow the output to be the input file.")(fn)
    return fn


class _Commands(click.Group):
    """The commands in the order a newcomer meets them, not alphabetically."""

    ORDER = ("info", "shrink", "quant", "report", "compare", "run", "npy", "embed", "check")

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands, key=lambda name: (self.ORDER + (name,)).index(name))


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onnxsurgery")
@click.option("-v", "--verbose", is_flag=True, help="Log what the passes do.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars (they show only on a terminal anyway).")
@click.pass_context
def main(ctx: click.Context, verbose: bool, quiet: bool) -> None:
    """Make ONNX model files smaller without breaking them.

    Start with `onnxsurgery info MODEL`: where the bytes are and what each command would save.
    Then `shrink IN OUT` (lossless) or `quant IN OUT` (int8 weights, verified in onnxruntime);
    `report MODEL` measures every method on one page. `COMMAND --help` lists a command's options;
    docs/commands.md is the tour."""
    ctx.ensure_object(dict)["quiet"] = quiet
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


@main.command(short_help="Merge identical constants: lossless.")
@click.argument("paths", nargs=-1, required=True, metavar="INPUT... OUTPUT")
@click.option("--min-elements", type=click.IntRange(min=1), default=MERGE_MIN_ELEMENTS,
              show_default=True, help="Leave constants with fewer elements alone.")
@click.option("--transposed", is_flag=True,
              help="Also merge a 2-D constant equal to another's transpose (adds a Transpose node).")
@click.option("--narrow", is_flag=True,
              help="int64->int32 and float64->float32 where exact and every consumer accepts it.")
@click.option("--reshaped", is_flag=True,
              help="Also merge a constant holding another's bytes under another shape (adds a Reshape node; "
                   "onnxruntime's fold of it holds one more copy in memory).")
@click.option("--verify", is_flag=True,
              help="Run input and result in onnxruntime; refuse to write unless outputs are identical.")
@click.option("--target", type=click.Choice(["tensorrt"]), default=None,
              help="tensorrt: check the result as `check` does, and say what merging means there.")
@verification_options
@_common_output_options
@_handle_errors
def shrink(paths, min_elements, transposed, narrow, reshaped, verify, target, inputs_npz, shapes, in_place,
           external_data, as_json):
    """Merge bit-identical constants (lossless). Like cp: INPUT OUTPUT, or INPUT... FOLDER/.

    A constant read only by Shape nodes is replaced by its shape. A model folder (an
    onnxruntime-genai or optimum export) as INPUT gives a new folder: MODEL_FOLDER OUT_FOLDER."""
    from . import api
    from .feeds import load_input_samples, parse_shapes

    if (inputs_npz or shapes) and not verify:
        raise OptionError("--inputs and --shape are what --verify runs on; add --verify")

    if len(paths) < 2:
        raise click.UsageError("give an INPUT and an OUTPUT")
    options = dict(external_data=external_data, verify=verify, min_elements=min_elements, transposed=transposed,
                   narrow=narrow, reshaped=reshaped, samples=load_input_samples(inputs_npz) if inputs_npz else None,
                   shapes=parse_shapes(shapes), target=target)
    folders = [p for p in paths[:-1] if Path(p).is_dir()]
    if folders:  # a model folder in, a folder out (api/folders.py)
        if in_place:
            raise OptionError("--in-place rewrites a file; a model folder is written to a new folder")
        if len(paths) != 2:
            raise OptionError(f"a model folder ({folders[0]}) goes alone: shrink FOLDER OUT_FOLDER")
        from .api.folders import shrink_folder

        reports = shrink_folder(paths[0], paths[1], **options)
        if not as_json:
            click.echo("\n".join(render_run(r) for r in reports))
    else:
        reports = []
        for src, dst in _outputs_for(paths[:-1], paths[-1]):
            _refuse_same_file(src, dst, in_place)
            report = api.shrink_file(src, dst, in_place=in_place, **options)
            reports.append(report)
            if not as_json:
                click.echo(render_run(report))
    if as_json:
        data = [r.to_dict() for r in reports]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))


@main.command(short_help="Where the bytes are, and what each command saves.")
@click.argument("path", type=str, callback=_model_path)
@click.option("--min-bytes", type=click.IntRange(min=0), default=1024, show_default=True,
              help="List constants of at least this many bytes.")
@click.option("--top", type=click.IntRange(min=0), default=20, show_default=True,
              help="Rows to print per table (0: all). --json always has all.")
@click.option("--json", "as_json", is_flag=True, help="Print the inventory as JSON.")
@_handle_errors
def info(path, min_bytes, top, as_json):
    """Show where the bytes are and what each method would save. Writes nothing."""
    from . import api

    data = api.info(path, min_bytes=min_bytes)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(render_info(path, data, top=top))


@main.command(short_help="Move constants out to .npy files.")
@click.argument("input_path", metavar="INPUT", callback=_model_path)
@click.argument("output_path", metavar="OUTPUT")
@click.option("--npy-dir", type=click.Path(file_okay=False),
              help="Folder for the .npy files [default: OUTPUT without .onnx, plus .npy/].")
@click.option("--min-bytes", type=click.IntRange(min=0), help="Move constants of at least this many bytes.")
@click.option("--names", multiple=True, metavar="GLOB",
              help="Move constants feeding nodes whose name matches (or whose own name matches). Repeatable.")
@click.option("--ops", multiple=True, metavar="OPTYPE",
              help="Move constants feeding nodes of this op type. Repeatable.")
@click.option("--no-merge", is_flag=True, help="Do not merge identical constants first.")
@_common_output_options
@_handle_errors
def npy(input_path, output_path, npy_dir, min_bytes, names, ops, no_merge, in_place, external_data, as_json):
    """Move constants out to .npy files, leaving graph inputs of the same names.

    By default the constants read more than once (after merging) move; --min-bytes, --names
    and --ops select instead. A manifest OUTPUT-stem.npy.json lists input -> file, dtype, shape,
    sha256. Run the result with `onnxsurgery run`, restore it with `onnxsurgery embed`.
    With --external-data, writes a standard OUTPUT + OUTPUT.data pair instead.
    """
    from . import api

    _refuse_same_file(input_path, output_path, in_place)
    report = api.npy_file(input_path, output_path, npy_dir=npy_dir, min_bytes=min_bytes,
                          names=names, ops=ops, external_data=bool(external_data), merge=not no_merge,
                          in_place=in_place)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else render_run(report))


@main.command(short_help="Put the .npy arrays of `npy` back in.")
@click.argument("input_path", metavar="INPUT", callback=_model_path)
@click.argument("output_path", metavar="OUTPUT")
@_common_output_options
@_handle_errors
def embed(input_path, output_path, in_place, external_data, as_json):
    """Put the .npy arrays of a model written by `npy` back as initializers."""
    from . import api

    _refuse_same_file(input_path, output_path, in_place)
    report = api.embed_file(input_path, output_path, in_place=in_place, external_data=bool(external_data))
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else render_run(report))


@main.command(short_help="Run a model in onnxruntime.")
@click.argument("model_path", metavar="MODEL", callback=_model_path)
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False),
              help="An .npz of input arrays by name; others are generated.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME:DxD",
              help="Fix a generated input's shape, e.g. x:1x3x224x224. Repeatable.")
@click.option("--save", "save_npz", type=click.Path(dir_okay=False), metavar="FILE.npz",
              help="Write the outputs to this .npz (a name ending in .npz, in an existing folder).")
@_handle_errors
def run(model_path, inputs_npz, shapes, save_npz):
    """Run a model in onnxruntime, feeding arrays moved out by `npy` automatically."""
    import numpy as np

    from . import api
    from .feeds import load_input_samples, parse_shapes

    if save_npz:
        _check_save_target(Path(save_npz), model_path)
    feeds = load_input_samples(inputs_npz)[0] if inputs_npz else None
    outputs = api.run_model(model_path, feeds, shapes=parse_shapes(shapes))
    for name, value in outputs.items():
        value = np.asarray(value)
        numeric = value.size and value.dtype.kind in "fiu"
        stats = f" min {value.min():.6g} max {value.max():.6g}" if numeric else ""
        click.echo(f"{name}: {value.dtype}{list(value.shape)}{stats}")
    if save_npz:
        _save_outputs(Path(save_npz), outputs)


def _check_save_target(save: Path, model_path: str) -> None:
    """`run --save`'s file, checked before the model runs: numpy appends .npz to any other name
    (`--save model.onnx` wrote model.onnx.npz), so another suffix is refused, as is a folder that
    does not exist."""
    if save.suffix.lower() != ".npz":
        raise OutputError(f"--save writes an .npz of the outputs; give a name ending in .npz, not {save}")
    if save.is_dir():
        raise OutputError(f"--save is a directory: {save}")
    if not save.parent.is_dir():
        raise OutputError(f"--save: output folder does not exist: {save.parent}")


def _save_outputs(save: Path, outputs: dict) -> None:
    """The outputs to `save`, written whole or not at all (a temporary file beside it, renamed)."""
    import os
    import tempfile

    import numpy as np

    fd, tmp = tempfile.mkstemp(prefix=f".{save.name}.", suffix=".npz", dir=save.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **outputs)
        os.replace(tmp, save)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"cannot write {save}: {e.strerror or e}") from e


@main.command(cls=GroupedCommand, short_help="Weights as 8- or 4-bit integers, verified.")
@click.argument("input_path", metavar="INPUT")
@click.argument("output_path", metavar="[OUTPUT]", required=False)
@request_options
@option("--target-error", type=click.FloatRange(min=0, min_open=True), metavar="X", group=STORE,
        help="Smallest file within this output error.")
@option("--target-size", type=click.FloatRange(min=0, min_open=True), metavar="MB", group=STORE,
        help="Smallest output error within this size.")
@option("--calibration", "calibration_npz", type=click.Path(dir_okay=False), metavar="FILE", group=STORE,
        help="Real inputs (.npz) to round for (GPTQ).")
@option("--dynamic", is_flag=True, group=STORE, help="onnxruntime's quantize_dynamic instead.")
@option("--no-merge", is_flag=True, group=WEIGHTS, help="Do not merge identical weights first.")
@option("--plan", "plan_file", type=click.Path(dir_okay=False), metavar="FILE", group=WEIGHTS,
        help="Apply a plan (from --dry-run --json).")
@where_options
@option("--no-verify", is_flag=True, group=CHECKS, help="Skip the onnxruntime comparison.")
@option("--max-error", type=float, metavar="X", group=CHECKS,
        help="Write nothing above this relative L2 error.")
@verification_options
@headline_option
@option("--dry-run", is_flag=True, group=OUTPUT, help="Print the plan and write nothing.")
@_common_output_options
@_handle_errors
def quant(input_path, output_path, runtime, memory, no_merge, no_verify, dynamic, target_error, target_size, max_error,
          calibration_npz, dry_run, plan_file, inputs_npz, shapes, outputs, in_place, external_data, as_json,
          **fields):
    """Weight-only quantization: float weights become 8- or 4-bit integers plus scales,
    verified in onnxruntime. INPUT may be a model folder; OUTPUT is then a new folder.

    Start with no option (int8, chosen per weight); add --target for where it runs. Every
    option explained: docs/quantization.md."""
    from . import api
    from .quant.plan import table
    from .feeds import load_input_samples, parse_shapes

    if output_path is None and not dry_run:
        raise click.UsageError("give an OUTPUT (or --dry-run to see the plan)")
    fields["runtime"] = runtime
    request = request_from(fields)
    runtime = fields.pop("runtime")
    common = dict(request=request, plan=plan_file, merge=not no_merge,
                  memory=int(memory * 1e9) if memory else None,
                  samples=load_input_samples(inputs_npz) if inputs_npz else None, shapes=parse_shapes(shapes),
                  target_error=target_error, target_size=int(target_size * 1e6) if target_size else None,
                  calibration=load_input_samples(calibration_npz) if calibration_npz else None)
    if dry_run:
        if dynamic:
            raise OptionError("--dynamic runs onnxruntime's quantize_dynamic, which has no plan to show")
        writes = {"--in-place": in_place, "--external-data/--one-file": external_data is not None,
                  "--max-error": max_error is not None,
                  "--no-verify": no_verify, "--outputs": bool(outputs)}
        if any(writes.values()):
            raise OptionError(f"--dry-run writes and verifies nothing; {next(k for k, v in writes.items() if v)} "
                              "does not apply")
        if Path(input_path).is_dir():  # a model folder: each model's plan (api/folders.py)
            from .api.folders import folder_models

            plans = {str(m): api.quant_plan(Path(input_path) / m, runtime=runtime, **common)
                     for m in folder_models(input_path)}
            click.echo(json.dumps({m: p.to_dict() for m, p in plans.items()}, indent=2) if as_json else
                       "\n".join(f"{Path(input_path) / m}:\n{table(p)}" for m, p in plans.items()))
            return
        plan = api.quant_plan(input_path, runtime=runtime, **common)
        click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else table(plan))
        return
    options = dict(verify=not no_verify, max_error=max_error, external_data=external_data, dynamic=dynamic,
                   runtime=runtime, outputs=tuple(outputs) or None, **common)
    if Path(input_path).is_dir():  # a model folder in, a folder out (api/folders.py)
        from .api.folders import quant_folder

        if in_place:
            raise OptionError("--in-place rewrites a file; a model folder is written to a new folder")

        reports = quant_folder(input_path, output_path, **options)
    else:
        _refuse_same_file(input_path, output_path, in_place)
        reports = [api.quant_file(input_path, output_path, in_place=in_place, **options)]
    if as_json:
        data = [r.to_dict() for r in reports]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
        return
    for report in reports:
        click.echo(render_run(report))
        if report.verification is not None:
            click.echo(render_verification(report.verification))
        for warning in report.warnings:
            click.echo(f"onnxsurgery: warning: {warning}", err=True)


@main.command(short_help="One HTML page measuring every method.")
@click.argument("model", callback=_model_path)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="The HTML file [default: MODEL without .onnx, plus .report.html].")
@click.option("--methods", default=",".join(METHOD_KEYS), show_default=True,
              help="Comma-separated methods to make and measure.")
@click.option("--min-bytes", type=click.IntRange(min=0), default=1024, show_default=True,
              help="Draw constants of at least this many bytes as their own boxes.")
@verification_options
@click.option("--json", "as_json", is_flag=True, help="Print the page's figures as JSON.")
@_handle_errors
def report(model, output, methods, min_bytes, inputs_npz, shapes, as_json):
    """Write one HTML page (self-contained, no network) to look at before shipping: where the
    bytes are, and for each method its file size (raw, gzip, brotli), output error, latency and
    memory after session creation, measured here by making each file. Takes a few times as long
    as one `quant`."""
    from .html_report import report_file
    from .feeds import load_input_samples, parse_shapes

    out = Path(output) if output else Path(model).with_name(Path(model).stem + ".report.html")
    data = report_file(model, out, methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
                       samples=load_input_samples(inputs_npz) if inputs_npz else None,
                       shapes=parse_shapes(shapes), inputs_file=inputs_npz, shape_specs=tuple(shapes),
                       min_bytes=min_bytes)
    click.echo(json.dumps(data, indent=2) if as_json else render_report_summary(model, str(out), data))


@main.command(short_help="What TensorRT's parser would refuse.")
@click.argument("model", callback=_model_path)
@click.option("--target", type=click.Choice(["tensorrt"]), default="tensorrt", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@_handle_errors
def check(model, target, as_json):
    """Check MODEL statically against what the target's parser takes (tensorrt: onnx-tensorrt's
    operator list for one TensorRT release, checked into onnxsurgery with its date): each op,
    its data type, and the attributes and constant inputs the list restricts; and the rules
    TensorRT's documentation states for quantized weights ("Working with Quantized Types",
    "Quantization Schemes", TensorRT 10.x: symmetric, positive scales, INT4 in blocks of 64 or
    128 along the last or second-to-last dimension, opset 21 for blocks, one DequantizeLinear per
    reader). One line per finding, naming its page; exit code 1 when there is any. No TensorRT
    needed, and no substitute for a real engine build."""
    from . import api

    result = api.check_file(model, target=target)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        for finding in result["refused"]:
            click.echo(f"{model}: {finding}")
        click.echo(f"{model}: {len(result['refused'])} finding{'s' * (len(result['refused']) != 1)} against "
                   f"{result['target']} (onnx-tensorrt's operator list, retrieved {result['retrieved']}) and the "
                   f"quantization rules of {result['rules'][0]}")
    if result["refused"]:
        sys.exit(1)


@main.command(short_help="Compare two models' outputs.")
@click.argument("reference", metavar="A", callback=_model_path)
@click.argument("candidate", metavar="B", callback=_model_path)
@verification_options
@headline_option
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@_handle_errors
def compare(reference, candidate, inputs_npz, shapes, outputs, as_json):
    """Run A and B in onnxruntime on the same inputs and compare their outputs.

    A model written by `npy` runs with its .npy arrays, as `run` runs it."""
    from . import api
    from .feeds import load_input_samples, parse_shapes

    result = api.compare(reference, candidate, shapes=parse_shapes(shapes), outputs=tuple(outputs) or None,
                         samples=load_input_samples(inputs_npz) if inputs_npz else None)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"{reference} vs {candidate}: " + ("identical outputs" if result["exact"] else "outputs differ"))
        for side, name in (("reference", reference), ("candidate", candidate)):
            if side in result.get("npy_arrays", {}):
                click.echo(f"  {name}: its {result['npy_arrays'][side]} .npy arrays given as initializers, as `run` "
                           "gives them")
        click.echo(render_verification(result))
