"""`quant`: weights as 8- or 4-bit integers, verified (api/quantizing.py). Its options are the
groups of run_options.py and QuantRequest, each declared once where it is defined."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from ..declare import OUTPUT
from ..quantization.request import QuantRequest
from ..render import render_run, render_verification
from ..run_options import Budget, Decision, Inputs, Output, QuantRun, Verification
from .common import handle_errors, output_options, refuse_same_file
from .options import GroupedCommand, declared_options, group_from, option


@click.command(cls=GroupedCommand, short_help="Weights as 8- or 4-bit integers, verified.")
@click.argument("input_path", metavar="INPUT")
@click.argument("output_path", metavar="[OUTPUT]", required=False)
@declared_options(QuantRequest)
@declared_options(Budget)
@declared_options(Decision)
@declared_options(Verification)
@declared_options(Inputs)
@option("--dry-run", is_flag=True, group=OUTPUT, help="Print the plan and write nothing.")
@output_options
@handle_errors
def quant(input_path, output_path, dry_run, as_json, **groups):
    """Weight-only quantization: float weights become 8- or 4-bit integers plus scales,
    verified in onnxruntime. INPUT may be a model folder; OUTPUT is then a new folder.

    Start with no option (int8, chosen per weight); add --target for where it runs. Every
    option explained: docs/quantization.md."""
    from .. import api
    from ..quantization.plan import table

    if output_path is None and not dry_run:
        raise click.UsageError("give an OUTPUT (or --dry-run to see the plan)")
    request = group_from(QuantRequest, groups)
    decision = dataclasses.replace(group_from(Decision, groups), request=request)
    run = QuantRun.of(dry_run=dry_run, decision=decision, budget=group_from(Budget, groups),
                      inputs=group_from(Inputs, groups), verification=group_from(Verification, groups),
                      output=group_from(Output, groups))
    folder = Path(input_path).is_dir()  # a model folder: each model (api/folders.py)
    if dry_run:
        if folder:
            from ..api.folders import folder_models

            plans = {str(m): api.quant_plan(Path(input_path) / m, run=run) for m in folder_models(input_path)}
            click.echo(json.dumps({m: p.to_dict() for m, p in plans.items()}, indent=2) if as_json else
                       "\n".join(f"{Path(input_path) / m}:\n{table(p)}" for m, p in plans.items()))
            return
        plan = api.quant_plan(input_path, run=run)
        click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else table(plan))
        return
    if folder:  # a model folder in, a folder out
        from ..api.folders import quant_folder

        reports = quant_folder(input_path, output_path, run=run)
    else:
        refuse_same_file(input_path, output_path, run.output.in_place)
        reports = [api.quant_file(input_path, output_path, run=run)]
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
