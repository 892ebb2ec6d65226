"""`shrink`: merge identical constants, lossless (api/shrinking.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..defaults import MERGE_MIN_ELEMENTS
from ..errors import OptionError
from ..render import render_run
from ..run_options import Inputs, Output, ShrinkRun
from .common import handle_errors, output_options, outputs_for, refuse_same_file, wrote
from .options import declared_options, group_from


@click.command(short_help="Merge identical constants: lossless.")
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
@declared_options(Inputs, only=("samples", "shapes"))
@output_options
@handle_errors(graph=False)
def shrink(paths, min_elements, transposed, narrow, reshaped, verify, target, as_json, **groups):
    """Merge bit-identical constants (lossless). Like cp: INPUT OUTPUT, or INPUT... FOLDER/.

    A constant read only by Shape nodes is replaced by its shape. A model folder (an
    onnxruntime-genai or optimum export) as INPUT gives a new folder: MODEL_FOLDER OUT_FOLDER."""
    from .. import api

    if len(paths) < 2:
        raise click.UsageError("give an INPUT and an OUTPUT")
    run = ShrinkRun(min_elements=min_elements, transposed=transposed, narrow=narrow, reshaped=reshaped, verify=verify,
                    target=target, inputs=group_from(Inputs, groups, only=("samples", "shapes")),
                    output=group_from(Output, groups))
    folders = [p for p in paths[:-1] if Path(p).is_dir()]
    if folders:  # a model folder in, a folder out (api/folders.py)
        if len(paths) != 2:
            raise OptionError(f"a model folder ({folders[0]}) goes alone: shrink FOLDER OUT_FOLDER")
        from ..api.folders import shrink_folder

        reports = shrink_folder(paths[0], paths[1], run=run)
        if not as_json:
            click.echo("\n".join(render_run(r) for r in reports))
    else:
        reports = []
        for src, dst in outputs_for(paths[:-1], paths[-1]):
            refuse_same_file(src, dst, run.output.in_place)
            report = api.shrink_file(src, dst, run=run)
            wrote()
            reports.append(report)
            if not as_json:
                click.echo(render_run(report))
    if as_json:
        data = [r.to_dict() for r in reports]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))


