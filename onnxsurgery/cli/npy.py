"""`npy`, `embed` and `run`: constants out to .npy files, back in, and a model run with them
(api/npy.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import OutputError
from ..render import render_run
from ..run_options import NpyRun, Output
from .common import handle_errors, model_argument, output_options, refuse_same_file
from .options import group_from


@click.command(short_help="Move constants out to .npy files.")
@click.argument("input_path", metavar="INPUT", callback=model_argument)
@click.argument("output_path", metavar="OUTPUT")
@click.option("--npy-dir", type=click.Path(file_okay=False),
              help="Folder for the .npy files [default: OUTPUT without .onnx, plus .npy/].")
@click.option("--min-bytes", type=click.IntRange(min=0),
              help="Move constants of at least this many bytes [default: 1024, unless --names or --ops select].")
@click.option("--names", multiple=True, metavar="GLOB",
              help="Move constants feeding nodes whose name matches (or whose own name matches). Repeatable.")
@click.option("--ops", multiple=True, metavar="OPTYPE",
              help="Move constants feeding nodes of this op type. Repeatable.")
@click.option("--shared", is_flag=True,
              help="Move only the constants read more than once after merging (scs4onnx's npy mode).")
@click.option("--no-merge", is_flag=True, help="Do not merge identical constants first.")
@output_options
@handle_errors
def npy(input_path, output_path, npy_dir, min_bytes, names, ops, shared, no_merge, as_json, **groups):
    """Move constants out to .npy files, leaving graph inputs of the same names.

    By default every constant of 1 KB or more moves (the weights, as `info` lists them);
    --min-bytes, --names and --ops select instead, --shared only those read more than once.
    A manifest OUTPUT-stem.npy.json lists input -> file, dtype, shape, sha256. Run the result
    with `onnxsurgery run`, restore it with `onnxsurgery embed`.
    With --external-data, writes a standard OUTPUT + OUTPUT.data pair instead.
    """
    from .. import api

    run = NpyRun(npy_dir=npy_dir, min_bytes=min_bytes, names=names, ops=ops, shared=shared, merge=not no_merge,
                 output=group_from(Output, groups))
    refuse_same_file(input_path, output_path, run.output.in_place)
    report = api.npy_file(input_path, output_path, run=run)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else render_run(report))


@click.command(short_help="Put the .npy arrays of `npy` back in.")
@click.argument("input_path", metavar="INPUT", callback=model_argument)
@click.argument("output_path", metavar="OUTPUT")
@output_options
@handle_errors
def embed(input_path, output_path, as_json, **groups):
    """Put the .npy arrays of a model written by `npy` back as initializers."""
    from .. import api

    output = group_from(Output, groups)
    refuse_same_file(input_path, output_path, output.in_place)
    report = api.embed_file(input_path, output_path, output=output)
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else render_run(report))


@click.command(short_help="Run a model in onnxruntime.")
@click.argument("model_path", metavar="MODEL", callback=model_argument)
@click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False),
              help="An .npz of input arrays by name; others are generated.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME:DxD",
              help="Fix a generated input's shape, e.g. x:1x3x224x224. Repeatable.")
@click.option("--save", "save_npz", type=click.Path(dir_okay=False), metavar="FILE.npz",
              help="Write the outputs to this .npz (a name ending in .npz, in an existing folder).")
@handle_errors
def run(model_path, inputs_npz, shapes, save_npz):
    """Run a model in onnxruntime, feeding arrays moved out by `npy` automatically."""
    import numpy as np

    from .. import api
    from ..running.feeds import parse_shapes
    from ..running.samples import load_input_samples

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
    from ..storage.staging import check_output_folder

    check_output_folder(save.parent, "--save: output folder")


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


