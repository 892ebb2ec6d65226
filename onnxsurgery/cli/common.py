"""What every command shares: one line per error and the exit codes, the MODEL argument's
check, the output paths like `cp`, and the Output group's options."""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import sys
import threading
from pathlib import Path

import click

from .. import progress
from ..errors import OnnxSurgeryError, OutputError
from ..run_options import Output
from .options import OUTPUT, declared_options, option

EXIT_ERROR = 2
EXIT_INTERNAL = 3


def one_line(message: str) -> str:
    """A message on one line: names from a damaged file may hold newlines or control bytes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the command is, as Ctrl-C's KeyboardInterrupt is: every
    staging folder and temporary file is removed on the way out (`kill PID` left a hidden
    `.out.onnx.XXXX/` folder of 56 MB)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_as_interrupts():
    """SIGTERM and SIGHUP raise `Interrupted` while the command runs (main thread only: a
    handler can be set nowhere else); the handlers before are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, _raise_interrupted)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wrote(count: int = 1) -> None:
    """A command says it has put `count` outputs in place (an interruption then says that nothing
    more was written, rather than nothing)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta["onnxsurgery.written"] = ctx.meta.get("onnxsurgery.written", 0) + count


def _interrupted(e: KeyboardInterrupt) -> None:
    signum = getattr(e, "signum", signal.SIGINT)
    how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    ctx = click.get_current_context(silent=True)
    more = " more" if ctx is not None and ctx.meta.get("onnxsurgery.written") else ""
    click.echo(f"onnxsurgery: interrupted ({how}); nothing{more} was written", err=True)
    sys.exit(128 + signum)


def _broken_pipe() -> None:
    """stdout closed early (`onnxsurgery info M | head`): nothing to say, and no second error when
    Python flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(1)


_resume_collector = False  # set by __main__.py where it paused the collector for the start


def resume_collector_after_load() -> None:
    """The collector, paused by `python -m onnxsurgery` before its imports, is resumed (after the
    freeze) by the command's first step, _load_stack."""
    global _resume_collector
    _resume_collector = True


def _load_stack(graph: bool = True) -> None:
    """numpy, onnx and onnx-graphsurgeon, which every command loads first, imported with the
    cyclic garbage collector paused, and what they made then left out of its later passes
    (gc.freeze): their module objects live as long as the process anyway. Loading them set off
    ~80 collections (16 ms of CPU, 7% of their import) and every full collection after it went
    over their 33k objects again (quant's workspaces collect as they close: 8-15 ms each). Done
    once per process, where they were not loaded yet (a script or a test calling the CLI again
    has its own objects, which are not frozen); the ~400 objects left as garbage by the imports
    stay. `python -m onnxsurgery` pauses the collector from its first line (__main__.py, through
    click's and the CLI's imports: 20 collections, 3.7-4.5 ms of their 50 ms of CPU): resumed
    here, after the freeze. `graph` False (`shrink`): no onnx-graphsurgeon here, its direct path
    makes no graph (api/shrink_direct.py); the graph's path imports it when it gets there."""
    global _resume_collector
    if _resume_collector:
        _resume_collector = False
    elif "onnx" in sys.modules or not gc.isenabled():
        return
    gc.disable()
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401

        if graph:
            import onnx_graphsurgeon  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def handle_errors(fn=None, *, graph: bool = True):
    """A command's errors as one line and an exit code; `graph` as `_load_stack`'s."""
    if fn is None:
        return functools.partial(handle_errors, graph=graph)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _load_stack(graph)
        debug = kwargs.pop("debug", False)
        ctx = click.get_current_context(silent=True)
        quiet = bool(ctx and (ctx.find_root().obj or {}).get("quiet"))
        progress.enable(progress.wanted(quiet, bool(kwargs.get("as_json"))))
        try:
            with signals_as_interrupts():
                return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except OnnxSurgeryError as e:
            click.echo(f"onnxsurgery: error: {one_line(str(e))}", err=True)
            sys.exit(EXIT_ERROR)
        except MemoryError:
            click.echo("onnxsurgery: error: out of memory", err=True)
            sys.exit(EXIT_ERROR)
        except KeyboardInterrupt as e:
            _interrupted(e)
        except BrokenPipeError:
            _broken_pipe()
        except OSError as e:  # the system refused a read or a write: the user's to fix, not a bug
            if debug:
                raise
            from ..errors import from_os_error

            click.echo(f"onnxsurgery: error: {one_line(str(from_os_error(e)))}", err=True)
            sys.exit(EXIT_ERROR)
        except Exception as e:  # a bug: still one line, unless --debug asks for the traceback
            if debug:
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            click.echo(f"onnxsurgery: internal error: {type(e).__name__}: {first} "
                       "(rerun with --debug for the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)

    return click.option("--debug", is_flag=True, hidden=True)(wrapper)


def model_argument(ctx, param, value):
    """A click callback for a MODEL argument: a folder or a missing path refused in one line,
    the same words for every command (api._common.model_file)."""
    from ..api._common import model_file

    for path in (value if isinstance(value, tuple) else (value,)):
        if path is not None:
            _refused_in_one_line(ctx, model_file, path)
    return value


def _refused_in_one_line(ctx, check, path) -> None:
    """`check(path)`, its OnnxSurgeryError said in one line with exit 2 (a click callback's)."""
    try:
        check(path)
    except OnnxSurgeryError as e:
        click.echo(f"onnxsurgery: error: {one_line(str(e))}", err=True)
        ctx.exit(EXIT_ERROR)


def model_or_folder_argument(ctx, param, value):
    """A click callback for a MODEL argument that may also be a model folder (`info`, `check`:
    each of its models, as `quant` and `shrink` take one); a folder without a model, or a missing
    path, is refused in one line."""
    from ..api.folders import folder_models

    if value is not None and Path(value).is_dir():
        _refused_in_one_line(ctx, folder_models, value)
        return value
    return model_argument(ctx, param, value)


def models_of(path: str) -> list[str]:
    """The model files `path` stands for: itself, or a model folder's models."""
    if not Path(path).is_dir():
        return [path]
    from ..api.folders import folder_models

    return [str(Path(path) / m) for m in folder_models(path)]


def refuse_same_file(src, dst, in_place: bool) -> None:
    """The output is the input: refused in the CLI's words (the API says in_place=True)."""
    try:
        same = not in_place and Path(dst).resolve() == Path(src).resolve()
    except OSError:
        same = False
    if same:
        raise OutputError(f"output is the input file ({dst}); pass --in-place to overwrite it")


def outputs_for(inputs: tuple[str, ...], output: str) -> list[tuple[Path, Path]]:
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


def output_options(fn):
    """--json, and the Output group's --in-place and --external-data/--one-file
    (run_options.Output; `group_from(Output, kwargs)` collects them)."""
    fn = option("--json", "as_json", is_flag=True, group=OUTPUT, help="Print the report as JSON.")(fn)
    return declared_options(Output)(fn)
