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
from ..errors import OnnxSurgeryError, OptionError, PlanError
from .common import handle_errors, output_options, outputs_for, refuse_same_file, wrote
from .options import GroupedCommand, declared_options, group_from, option


def _plan_of(key: str, path: Path, run, *, several: bool):
    """`path`'s plan; where several models are planned, an error names the one it is about
    (`quant A B --dry-run`: B exists, so it is planned too, and its refusal said nothing of B)."""
    from .. import api

    try:
        return api.quant_plan(path, run=run)
    except OnnxSurgeryError as e:
        if several and key not in str(e):
            e.args = (f"{key}: {e}", *e.args[1:])
        raise


@click.command(cls=GroupedCommand, short_help="Weights as 8- or 4-bit integers, verified.")
@click.argument("paths", nargs=-1, required=True, metavar="INPUT... [OUTPUT]")
@declared_options(QuantRequest)
@declared_options(Budget)
@declared_options(Decision)
@declared_options(Verification)
@declared_options(Inputs)
@option("--dry-run", is_flag=True, group=OUTPUT, help="Print the plan and write nothing.")
@output_options
@handle_errors
def quant(paths, dry_run, as_json, **groups):
    """Weight-only quantization: float weights become 8- or 4-bit integers plus scales,
    verified in onnxruntime. Like cp: INPUT OUTPUT, or INPUT... FOLDER/. INPUT may be a model
    folder; OUTPUT is then a new folder.

    Start with no option (int8, chosen per weight); add --target for where it runs. Every
    option explained: docs/quantization.md."""
    from .. import api
    from ..api._common import folder_plan, plan_json
    from ..quantization.plan import table

    if dry_run:  # `quant IN OUT --dry-run`: the OUT it would write (not there yet) is no input
        inputs = paths[:-1] if len(paths) > 1 and not Path(paths[-1]).exists() else paths
        output_path = None
    elif len(paths) < 2:
        raise click.UsageError("give an INPUT and an OUTPUT (or --dry-run to see the plan)")
    else:
        inputs, output_path = paths[:-1], paths[-1]
    request = group_from(QuantRequest, groups)
    decision = dataclasses.replace(group_from(Decision, groups), request=request)
    run = QuantRun.of(dry_run=dry_run, decision=decision, budget=group_from(Budget, groups),
                      inputs=group_from(Inputs, groups), verification=group_from(Verification, groups),
                      output=group_from(Output, groups))
    if decision.plan is not None:  # read here, once the options agree: a file that is not JSON is refused naming
        decision = dataclasses.replace(run.decision, plan=plan_json(decision.plan))  # the flag that writes one
        run = dataclasses.replace(run, decision=decision)
    folders = [p for p in inputs if Path(p).is_dir()]  # a model folder: each model (api/folders.py)
    if folders and len(inputs) > 1:
        raise OptionError(f"a model folder ({folders[0]}) goes alone: quant FOLDER OUT_FOLDER")
    plans = None if folders else folder_plan(decision.plan)  # several models' plans, by the path given
    if plans is not None and any(i not in plans for i in inputs):
        missing = next(i for i in inputs if i not in plans)
        raise PlanError(f"--plan holds the plans of {', '.join(plans)}, none for {missing}: give one model's plan "
                        "(`quant MODEL --dry-run --json`), or the inputs that `--dry-run --json` was given")
    if dry_run:
        from ..api.folders import folder_models

        # keyed as --plan looks them up: a folder's models by their path in it, files as given
        models = {str(m): Path(inputs[0]) / m for m in folder_models(inputs[0])} if folders else \
            {i: Path(i) for i in inputs}
        plans = {key: _plan_of(key, path, run, several=len(models) > 1) for key, path in models.items()}
        if len(plans) == 1 and not folders:
            plan = next(iter(plans.values()))
            click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else table(plan))
        else:
            shown = {(str(Path(inputs[0]) / m) if folders else m): p for m, p in plans.items()}
            click.echo(json.dumps({m: p.to_dict() for m, p in plans.items()}, indent=2) if as_json else
                       "\n".join(f"{m}:\n{table(p)}" for m, p in shown.items()))
        return
    if folders:  # a model folder in, a folder out
        from ..api.folders import quant_folder

        reports = quant_folder(inputs[0], output_path, run=run)
        wrote(len(reports))
        shown = reports
    else:
        reports, shown = [], []
        for given, (src, dst) in zip(inputs, outputs_for(inputs, output_path)):
            refuse_same_file(src, dst, run.output.in_place)
            this = run if plans is None else dataclasses.replace(
                run, decision=dataclasses.replace(decision, plan=plans[given]))
            reports.append(api.quant_file(src, dst, run=this))
            wrote()
            if not as_json:
                _show(reports[-1])
    if as_json:
        data = [r.to_dict() for r in reports]
        click.echo(json.dumps(data[0] if len(data) == 1 else data, indent=2))
        return
    for report in shown:
        _show(report)


def _show(report) -> None:
    click.echo(render_run(report))
    if report.verification is not None:
        click.echo(render_verification(report.verification))
    for warning in report.warnings:
        click.echo(f"onnxsurgery: warning: {warning}", err=True)
