"""`python -m onnxsurgery`: the CLI (cli/), then a quick exit.

Once the command is done (files written and closed, its threads joined, its report printed),
tearing the interpreter down frees every module and object one by one: numpy, onnx,
onnx-graphsurgeon and onnxruntime loaded made that 0.05 s of CPU on this machine (a quarter of a
small model's `quant` start, a tenth of `shrink` on the ALBERT sample). The exit functions still
run (logging's flush, temporary folders' finalizers) and the streams are flushed; only the
teardown is skipped. Where a thread of ours is still running, or a stream cannot be flushed,
the exit is the usual one."""

import atexit
import gc
import os
import sys
import threading

# the collector paused through the CLI's imports, resumed once the command has loaded numpy and
# onnx and frozen what the imports made (cli/common.py's _load_stack); a command that never gets
# there (--help, a usage error) exits with it paused
_collecting = gc.isenabled()
gc.disable()

from .cli import main  # noqa: E402
from .cli.common import resume_collector_after_load  # noqa: E402

if _collecting:
    resume_collector_after_load()


def _exit_status(code) -> int:
    """What `sys.exit(code)` makes the process's status: None is 0, text is printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _exit(code) -> None:
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if others:
        sys.exit(code)  # the interpreter joins them first
    status = _exit_status(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: the usual exit says it as it always has
        sys.exit(code)
    os._exit(status)


try:
    main()
except SystemExit as e:
    _exit(e.code)
_exit(0)
