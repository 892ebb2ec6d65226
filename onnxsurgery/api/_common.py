"""What the commands share: opening a model in memory and running passes on it, and writing a
result that is checked before it is put in place."""

from __future__ import annotations

import functools
import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import onnx

from ..errors import InputError, OnnxSurgeryError, OutputError, from_os_error
from ..storage.skim import remembering
from ..storage.staging import check_output_path, stage_model
from ..report import RunReport

if TYPE_CHECKING:  # the gs workspace loads where a command opens one (shrink_direct.py's path does not)
    from ..pipeline import Workspace


def os_errors(fn: Callable | None = None, *, output: str = "output_path") -> Callable:
    """`fn` with the OSErrors its reads and writes may raise (a path through a file, a folder it
    may not write, a full disk) raised as the OnnxSurgeryError the API promises
    (`errors.from_os_error`: OutputError naming the output, or InputError naming the file read).
    `output` names `fn`'s output parameter."""
    if fn is None:
        return functools.partial(os_errors, output=output)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            with remembering():  # a file's skim kept for the call (storage/skim.py)
                return fn(*args, **kwargs)
        except OnnxSurgeryError:
            raise
        except OSError as e:
            try:
                target = signature.bind_partial(*args, **kwargs).arguments.get(output)
            except TypeError:
                target = None
            raise from_os_error(e, target) from e

    return wrapper


def plan_json(source):
    """A plan as `quant --plan` takes it: a path read as JSON here, so that a file that is not JSON
    (the table `--dry-run` prints without `--json`) is refused with the flag that writes one; a
    dict or a list of records as it is."""
    if not isinstance(source, (str, os.PathLike)):
        return source
    import json

    from ..errors import PlanError

    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"plan file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"cannot read plan {path}: {getattr(e, 'strerror', None) or e}") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise PlanError(f"plan {path} is not JSON ({e}): a plan file is what `quant MODEL --dry-run --json > "
                        f"{path.name}` writes (--dry-run alone prints the plan as a table, to read)") from None


def folder_plan(data) -> dict | None:
    """The plans of a model folder's `quant FOLDER --dry-run --json` (model path -> plan), or None
    when `data` is one model's plan."""
    if isinstance(data, dict) and "weights" not in data and data and all(
            isinstance(v, dict) and "weights" in v for v in data.values()):
        return data
    return None


def model_file(source, what: str = "input"):
    """`source` as given, once a path is known to name a file: a folder and a missing path are
    each refused in one line of their own ("is a directory", as `info` says it), before any
    reader's own words. A ModelProto or gs.Graph passes as it is."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise InputError(f"{what} is a directory, not an .onnx file: {path}")
        if not path.exists():
            raise InputError(f"{what} not found: {path}")
    return source


def output_for(input_path, output_path, in_place: bool) -> Path:
    """staging.check_output_path, with the Python API's word for overwriting the input (the CLI
    refuses the same first, with its own: cli._refuse_same_file)."""
    model_file(input_path)
    if not in_place:
        try:
            same = Path(output_path).resolve() == Path(input_path).resolve()
        except OSError:
            same = False
        if same:
            raise OutputError(f"output is the input file ({output_path}); pass in_place=True to overwrite it")
    return check_output_path(input_path, output_path, in_place)


def _describe(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    return f"<{type(source).__name__}>"


def in_memory(model, command: str, run_passes, prepare=None) -> tuple[onnx.ModelProto, RunReport, Workspace]:
    """Open `model`, let `prepare(ws, report)` swap the workspace if it must (an opset
    upgrade), run `run_passes(ws, report)`, and return the self-contained result."""
    from ..pipeline import open_workspace

    ws = open_workspace(model)
    report = RunReport(command, _describe(model), bytes_before=ws.input_bytes)
    if prepare is not None:
        ws = prepare(ws, report)
    run_passes(ws, report)
    report.passes = ws.reports
    result = ws.materialized(ws.finish())
    report.bytes_after = result.ByteSize()
    return result, report, ws


def write_checked(ws: Workspace, produce: Callable[[], onnx.ModelProto], out: Path,
                   external_data: bool, check: Callable[[Path], None] | None) -> list[Path]:
    """Stage the model `produce` returns, close the workspace, run `check` on the staged file,
    then put it in place. The model is produced here, not passed in, so that nothing else holds
    it: it and the graph are released before `check` creates onnxruntime sessions, which need
    several times the model's size."""
    result = produce()
    staged = stage_model(result, out, external_data=external_data, files=ws.files, take_spill=True)
    del result
    with staged:
        ws.close(collect=check is not None)
        if check is not None:
            check(staged.path)
        return staged.commit()
