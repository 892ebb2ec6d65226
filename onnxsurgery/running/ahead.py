"""Work started now whose result is asked for later: the input model's reference outputs,
computed on another thread while the model is quantized (verify.reference_ahead).

Those outputs depend only on the input and the samples, and verification asked for them
after quantizing and writing, then waited for them: on small and mid-size models the
reference's session and runs were a third to a half of verification (open_nsfw: 1.3 s of a
3 s `quant`). onnxruntime computes without the interpreter's lock, so on a machine with a core
to spare they cost little beside the quantizer's numpy.

The thread allocates from the process's main heap (`one_heap`): glibc gives each new thread a
heap of its own, and the free end of such a heap is not given back (malloc_trim trims the main
heap's end only). eeg_spindles' reference session, freed, still held 48 MB (6 MB run on the main
thread) when the result's session came on top of it: `quant --dtype int4` went from 151 MB to
198-236 MB, over its bound (zoo invariant 4); open_nsfw and captcha +10-20 MB.

Only part of the work runs beside the quantizer: larger runs wait at a `Gate` until quantizing
ends. The reference's batch-2 sample holds about twice what one run at batch 1 does, which int4's
clip search may not leave spare.
"""

from __future__ import annotations

import threading
from typing import Callable

from .heap import one_heap


class Gate:
    """Where work on another thread waits until the caller lets it go on (`open`). Opened by
    whatever waits for that work (Pending), so that nobody waits on a closed gate."""

    def __init__(self):
        self.wider = True  # the batch-2 sample still wanted (open's `wider`)
        self.decided = threading.Event()  # `wider` is final: opened with a verdict (open's `final`)
        self._open = threading.Event()
        self.reached = threading.Event()  # the work waits here (or went past: opened already)

    def passing(self) -> None:
        """Called by the work: waits here until the gate is open."""
        self.reached.set()
        self._open.wait()

    def open(self, wider: bool = True, final: bool = True) -> None:
        """`wider` False: the work leaves out its batch-2 sample, not yet run (running/readers.py).
        `final` False: opened early, before that is known (quant's small models)."""
        self.wider = self.wider and wider
        if final:
            self.decided.set()
        self._open.set()


class Pending:
    """`compute()` running on its own thread; `result()` waits for it and returns what it
    returned, or raises what it raised (where the caller would have raised it computing now).
    `gate`: where `compute` waits for the rest of its work (`go_on`); opened by `result`,
    `wait` and `cancel` too, which would otherwise wait for a thread that waits for them."""

    def __init__(self, compute: Callable[[], object], cancel: Callable[[], None] | None = None,
                 gate: Gate | None = None):
        self._cancel = cancel
        self.gate = gate
        self._result: object = None
        self._error: BaseException | None = None
        one_heap()
        # a daemon: a caller that never asks (its own error) must not keep the process at a closed gate
        self._thread = threading.Thread(target=self._work, args=(compute,), name="onnxsurgery-ahead", daemon=True)
        self._thread.start()

    def _work(self, compute: Callable[[], object]) -> None:
        try:
            self._result = compute()
        except BaseException as e:  # noqa: BLE001 - handed to whoever asks for the result
            self._error = e

    def go_on(self, wider: bool = True, final: bool = True) -> None:
        """The work held at the gate may run now (quant: the model is quantized); `wider` False:
        without its batch-2 sample; `final` False: whether it is wanted is not known yet (Gate.open)."""
        if self.gate is not None:
            self.gate.open(wider, final)

    def result(self) -> object:
        self.go_on()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self) -> None:
        """Until the work is done, its result or error left unread (a run that fails before it
        asks: the thread's session is gone before the caller goes on)."""
        self.go_on()
        self._thread.join()

    def cancel(self) -> None:
        """Stop the work where it can be stopped (onnxruntime's runs: RunOptions.terminate), then
        wait for it: a run that failed, or was interrupted (Ctrl-C), does not wait for the
        reference's runs of a large model to finish before it exits. Nothing where it is done."""
        if self._thread.is_alive() and self._cancel is not None:
            self._cancel()
        self.go_on()  # after the terminate flag: the runs held there are refused
        self._thread.join()
