"""A model folder in, a folder out (issue 49): `quant FOLDER OUT_FOLDER` and `shrink FOLDER
OUT_FOLDER` on an export that is a folder, not a file.

onnxruntime-genai's builder writes `model.onnx`, `model.onnx.data`, `genai_config.json` (which
names the model files and their inputs) and tokenizer files; optimum writes one or more `.onnx`
files (encoder, decoder, decoder with past, merged) beside `config.json`,
`generation_config.json` and tokenizer files, sometimes under `onnx/`. A runtime reads the
folder, so the output is a folder that runs as it is:

- the models: the files `genai_config.json` names (every `"filename"` under `"model"`), or,
  without one, every `.onnx` file in the folder and its subfolders; each goes through the
  command to the same relative path in the output, so the names the config holds stay true
  (a model's weights go to `<model>.data` beside it, which the .onnx names; no config names it);
- every other file is copied as it is (configs, tokenizer files, a README, a license), except
  the input models' own external data files, which their outputs replace;
- the folder is written beside the output under a temporary name and renamed into place when
  every model is written and verified, so a failure leaves nothing (an output folder that
  exists must be empty); afterwards, every file `genai_config.json` names is checked to exist.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import onnx

from ..errors import InputError, OptionError, OutputError
from ..storage.paths import confined, external_locations
from ..report import RunReport
from ._common import os_errors

GENAI_CONFIG = "genai_config.json"


def folder_models(folder: str | os.PathLike) -> list[Path]:
    """The models of a model folder, relative to it (module doc)."""
    folder = Path(folder)
    config = folder / GENAI_CONFIG
    if config.is_file():
        names = genai_model_files(config)
        if not names:
            raise InputError(f"{config} names no model file (no \"filename\" under \"model\")")
        models = []
        for name in names:
            path = confined(folder, name, f"{GENAI_CONFIG}: model file")
            if not path.is_file():
                raise InputError(f"{config} names {name}, which is not in {folder}")
            models.append(path.relative_to(folder.resolve()))
        return models
    models = sorted(p.relative_to(folder) for p in folder.rglob("*.onnx") if p.is_file())
    if not models:
        raise InputError(f"input is a directory with no .onnx file (nor {GENAI_CONFIG}): {folder}")
    return models


def genai_model_files(config: Path) -> list[str]:
    """Every `"filename"` under `"model"` in a genai_config.json (decoder, encoder, vision, ...)."""
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"cannot read {config}: {e}") from None
    names: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "filename" and isinstance(value, str) and value not in names:
                    names.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data.get("model") if isinstance(data, dict) else None)
    return names


def _data_files(model: Path) -> set[Path]:
    """The external data files `model` names (resolved), read without its weights."""
    proto = onnx.load(str(model), load_external_data=False)
    return {confined(model.parent, location, f"tensor '{name}': external data location")
            for name, location in external_locations(proto)}


def run_on_folder(command: str, input_dir: str | os.PathLike, output_dir: str | os.PathLike,
                  run_one: Callable[[Path, Path], RunReport]) -> tuple[list[RunReport], list[str]]:
    """`run_one(model, output_model)` on each model of `input_dir`, the other files copied
    (module doc). Returns the reports and the files copied (relative paths)."""
    src, out = Path(input_dir), Path(output_dir)
    models = folder_models(src)
    if (out.exists() and not out.is_dir()) or (not out.exists() and out.suffix.lower() == ".onnx"):
        raise OutputError(f"the input is a model folder, so the output is a folder too, not {out} "
                          f"(e.g. {out.with_suffix('')}/)")
    if out.is_dir() and any(out.iterdir()):
        raise OutputError(f"output folder is not empty: {out} (a model folder is written whole, into a new or "
                          "empty folder)")
    if not out.parent.resolve().exists():
        raise OutputError(f"output folder's parent does not exist: {out.parent}")
    from ..storage.staging import check_output_folder

    check_output_folder(out.parent.resolve(), "output folder's parent")
    if out.resolve() == src.resolve() or out.resolve().is_relative_to(src.resolve()):
        raise OutputError(f"the output folder {out} is inside the input folder {src}")
    skip = {(src / m).resolve() for m in models}
    for model in models:
        skip |= _data_files(src / model)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp's 0700 would make the shipped folder private
    try:
        reports = []
        for model in models:
            (staging / model).parent.mkdir(parents=True, exist_ok=True)
            report = run_one(src / model, staging / model)
            report.output = str(out / model)
            reports.append(report)
        copied = []
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src)
            if path.is_dir() or path.resolve() in skip or any(part.startswith(".") for part in rel.parts) \
                    or (staging / rel).exists():
                continue
            if path.is_symlink() and not path.resolve().is_relative_to(src.resolve()):
                continue  # a link out of the folder is not the export's to ship
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, staging / rel)
            copied.append(str(rel))
        _check_config(staging)
        if out.is_dir():
            out.rmdir()  # empty: checked above
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return reports, copied


def _check_config(folder: Path) -> None:
    """Every model file the output's genai_config.json names is there."""
    config = folder / GENAI_CONFIG
    if config.is_file():
        for name in genai_model_files(config):
            if not (folder / name).is_file():
                raise OutputError(f"{GENAI_CONFIG} names {name}, which the output folder lacks")


@os_errors(output="output_dir")
def quant_folder(input_dir: str | os.PathLike, output_dir: str | os.PathLike, **options) -> list[RunReport]:
    """`quant_file` on each model of a model folder into a new folder that runs as it is
    (module doc); the other files copied. The reports' notes say what was copied."""
    from ..run_options import QuantRun
    from .quantizing import quant_file

    run = QuantRun.given(options.pop("run", None), options)
    _refuse_in_place(run.output.in_place)
    runs = _runs_by_model(run, folder_models(input_dir))
    reports, copied = run_on_folder("quant", input_dir, output_dir,
                                    lambda model, out: quant_file(model, out, run=runs(model.relative_to(input_dir))))
    _note_copied(reports, copied)
    return reports


@os_errors(output="output_dir")
def shrink_folder(input_dir: str | os.PathLike, output_dir: str | os.PathLike, **options) -> list[RunReport]:
    """`shrink_file` on each model of a model folder, as `quant_folder` does."""
    from ..run_options import ShrinkRun
    from .shrinking import shrink_file

    run = ShrinkRun.given(options.pop("run", None), options)
    _refuse_in_place(run.output.in_place)
    reports, copied = run_on_folder("shrink", input_dir, output_dir,
                                    lambda model, out: shrink_file(model, out, run=run))
    _note_copied(reports, copied)
    return reports


def _runs_by_model(run, models: list[Path]) -> Callable:
    """The run for each model of a folder: a folder's plan (what `quant FOLDER --dry-run --json`
    writes: model path -> plan) gives each model its own; one model's plan fits a folder of one."""
    import dataclasses

    from ..errors import PlanError
    from ._common import folder_plan, plan_json

    if run.decision.plan is None or isinstance(run.decision.plan, list):
        return lambda model: run
    data = plan_json(run.decision.plan)
    plans = folder_plan(data)
    names = [str(m) for m in models]
    if plans is None:
        if len(models) != 1:
            raise PlanError(f"the plan is one model's, and the folder has {len(models)} ({', '.join(names)}): "
                            "`quant FOLDER --dry-run --json` writes a plan per model")
        plans = {names[0]: data}
    unknown = sorted(set(plans) - set(names))
    if unknown:
        raise PlanError(f"the plan names {unknown[0]}, which is not a model of the folder ({', '.join(names)})")
    missing = [n for n in names if n not in plans]
    if missing:
        raise PlanError(f"the plan has no entry for {missing[0]}; `quant FOLDER --dry-run --json` writes one per model")

    def run_for(model: Path):
        return dataclasses.replace(run, decision=dataclasses.replace(run.decision, plan=plans[str(model)]))

    return run_for


def _refuse_in_place(in_place: bool) -> None:
    if in_place:
        raise OptionError("--in-place rewrites a file; a model folder is written to a new folder")


def _note_copied(reports: list[RunReport], copied: list[str]) -> None:
    if reports:
        shown = ", ".join(copied[:6]) + (f", and {len(copied) - 6} more" if len(copied) > 6 else "")
        reports[-1].notes.append(f"copied {len(copied)} other file{'s' * (len(copied) != 1)} of the folder as "
                                 f"{'they are' if len(copied) != 1 else 'it is'}" + (f": {shown}" if copied else ""))
