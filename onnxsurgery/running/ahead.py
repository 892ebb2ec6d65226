"""Work started now whose result is asked for later: the input model's reference outputs,
computed on another thread while the model is quantized (verify.reference_ahead).

Those outputs depend only on the input and the samples, and verification asked for them
after quantizing and writing, then waited for them: on small and mid-size models the
reference's session and runs were a third to a half of verification (open_nsfw: 1.3 s of a
3 s `quant`). onnxruntime computes without the interpreter's lock, so on a machine with a core
to spare they cost little beside the quantizer's numpy.
"""

from __future__ import annotations

import threading
from typing import Callable


class Pending:
    """`compute()` running on its own thread; `result()` waits for it and returns what it
    returned, or raises what it raised (where the caller would have raised it computing now)."""

    def __init__(self, compute: Callable[[], object], cancel: Callable[[], None] | None = None):
        self._cancel = cancel
        self._result: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, args=(compute,), name="onnxsurgery-ahead")
        self._thread.start()

    def _work(self, compute: Callable[[], object]) -> None:
        try:
            self._result = compute()
        except BaseException as e:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = e

    def result(self) -> object:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self) -> None:
        """Until the work is done, its result or error left unread (a run that fails before it
        asks: the thread's session is gone before the caller goes on)."""
        self._thread.join()

    def cancel(self) -> None:
        """Stop the work where it can be stopped (onnxruntime's runs: RunOptions.terminate), then
        wait for it: a run that failed, or was interrupted (Ctrl-C), does not wait for the
        reference's runs of a large model to finish before it exits. Nothing where it is done."""
        if self._thread.is_alive() and self._cancel is not None:
            self._cancel()
        self._thread.join()
