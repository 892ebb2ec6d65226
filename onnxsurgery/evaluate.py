"""Each method's file, made and measured where it runs: what `report` shows.

For every method (shrink, quant int8, int4, --keep-quantized, --fp16, --levels) the file is
made with the same API call its CLI command makes, into a scratch folder, then measured:
bytes on disk and after gzip and brotli (what a download costs), output error against the
original on the same inputs, median latency, and the memory that creating an onnxruntime CPU
session adds (peak RSS growth in a fresh process, session_memory.py). A method that fails on
the model gives a row that says why instead of figures; the others still run.
"""

from __future__ import annotations

import glob
import os
import shlex
import statistics
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .api import quant_file, shrink_file
from .errors import OnnxSurgeryError, VerificationError, runtime_message
from .running.generated import runnable_inputs
from .storage.io import open_model
from .running.kv_cache import is_cache_output
from .progress import progress
from .quantization.request import QuantRequest
from .running.session_memory import OverLimit, measure_in_fresh_process
from .running.sessions import session
from .running.stream_size import streams
from .running.output_errors import compare_outputs, pooled_agreement
from .running.output_kinds import headline_outputs

# Latency: at least this many timed runs after one warm-up, more while within the time budget
# (2 s before: 20 of 398 s on SmolLM2's export, where one run takes 0.3-0.6 s here).
MIN_RUNS, MAX_RUNS, LATENCY_BUDGET_S = 3, 20, 1.0
# The least spread a latency ratio is read against (issue 57, item 12: a byte-identical copy showed
# 1.17-1.27x in red on a loaded machine). Each report measures its own: how far the original's runs
# spread (interquartile range over the median) and how far its medians at the start and at the end
# of the run differ; a ratio within that band of 1 is noise, and the page leaves it uncoloured.
MIN_LATENCY_NOISE = 0.05
BROTLI_QUALITY = 5  # what servers use compressing on the fly; 9 took 11 s on 16 MB, 11 took 67 s
# Compressing whole files took most of `report`'s time on SmolLM2's 540 MB export (398 s in
# all): gzip -9 runs at 0.7-1.5 MB/s on its float32 weights (bfloat16 values widened: two zero
# bytes in four), brotli at about 5 MB/s. Above this size a file's compressed sizes are
# estimated from SAMPLE_PIECES evenly spaced pieces, compressed as one stream, and the page
# says so. (gzip's window is 32 KB, brotli's at quality 5 4 MB: pieces of 64 KB leave gzip's
# figure unchanged and brotli's within a few percent; measured below in tests and the bench.)
EXACT_COMPRESSION_BYTES = 32 * 2**20
# A file that runs streamed (stream_size.STREAM_BYTES) has its default session's memory measured up
# to this much, then stopped, the row saying so: that session holds every weight, and on a model
# larger than the machine the measurement alone would not fit.
MEMORY_LIMIT = 2**30
SAMPLE_PIECES, SAMPLE_PIECE_BYTES = 64, 2**16


@dataclass(frozen=True)
class Method:
    key: str
    command: str  # "shrink" or "quant"
    request: QuantRequest | None = None  # quant: what is asked (its flags are derived from it)
    what: str = ""

    @property
    def flags(self) -> tuple[str, ...]:
        """What selects it on the command line."""
        return ("--verify",) if self.command == "shrink" else tuple(self.request.flags())


METHODS = (
    Method("shrink", "shrink", None, "identical constants merged; lossless"),
    Method("int8", "quant", QuantRequest(), "8-bit weights, the default: float weights again at load"),
    Method("int4", "quant", QuantRequest(dtype="int4"), "4-bit weights, kept 4-bit in memory"),
    Method("keep-quantized", "quant", QuantRequest(keep_quantized=True),
           "8-bit weights kept 8-bit in memory (DequantizeLinear)"),
    Method("fp16", "quant", QuantRequest(fp16=True), "float16 weights, a Cast back to float32"),
    Method("levels", "quant", QuantRequest(levels=256),
           "float weights snapped to 256 values per group: same size, compresses well"),
)
# METHOD_KEYS (defaults.py: what `report --help` lists without importing this module) names these, in
# this order; tests/test_layers.py checks that.


@dataclass
class Measurement:
    key: str
    what: str
    command_line: str
    bytes: int | None = None
    gzip_bytes: int | None = None
    brotli_bytes: int | None = None
    compressed_estimated: bool = False  # gzip and brotli sizes from evenly spaced pieces of the file
    exact: bool | None = None
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    argmax_agreement: float | None = None  # the lowest over outputs that have one
    latency_ms: float | None = None
    latency_min_ms: float | None = None  # the fastest run: the figure load disturbs least
    latency_noise: float | None = None  # the spread a latency ratio must exceed to mean something (a fraction)
    memory_bytes: int | None = None
    memory_note: str | None = None  # why memory_bytes is None: stopped over MEMORY_LIMIT
    failed: str | None = None  # why there are no figures

    def to_dict(self) -> dict:
        return asdict(self)


def measure_methods(model_path: str | os.PathLike, scratch: str | os.PathLike, *,
                    methods: tuple[Method, ...] = METHODS, samples: list[dict[str, np.ndarray]] | None = None,
                    shapes: dict[str, list[int]] | None = None, inputs_file: str | None = None,
                    shape_specs: tuple[str, ...] = ()) -> list[Measurement]:
    """The original's figures first, then one Measurement per method, in order. `samples`
    (else one generated sample) feed every run; `inputs_file` and `shape_specs` only go into
    the printed commands, so that each row's command makes that row's file.

    Each file is made as its row's command makes it: quant gets `samples` only where the user
    gave them (--inputs), as the command does; generated ones serve the measurements alone.
    The original runs once per sample and its outputs are kept: each method's file then runs
    in one session, for its errors and its latency (SmolLM2's 540 MB export: 398 s in all
    before, when each comparison loaded the original again and timing loaded each file again)."""
    model_path, scratch = Path(model_path), Path(scratch)
    given = samples
    original_session = _session(model_path)
    if samples is None:
        names = [o.name for o in original_session.get_outputs()]
        samples = [runnable_inputs(original_session, lambda feeds, s=original_session: s.run(names, feeds),
                                   shapes=shapes, model=model_path)[0]]
    expected = Outputs(original_session, samples)
    extra = ([f"--inputs {shlex.quote(inputs_file)}"] if inputs_file else []) + [f"--shape {s}" for s in shape_specs]
    original = Measurement("original", "the input, as it is", "")
    original_times = _latencies(original_session, model_path, samples[0], warm=True)
    del original_session
    rows = [original]
    background = _Measuring()
    try:
        background.start(original, model_path)
        for method in progress(list(methods), "report", unit="method"):
            out = scratch / f"{model_path.stem}.{method.key}.onnx"
            cli = ["onnxsurgery", method.command, shlex.quote(str(model_path)), shlex.quote(out.name), *method.flags]
            row = Measurement(method.key, method.what, " ".join(cli + (extra if method.command == "quant" else [])))
            rows.append(row)
            try:
                _make(method, model_path, out, given, shapes)  # meanwhile the previous file is measured
                background.wait()  # nothing else runs while this file is timed
                candidate = _session(out)
                expected.compare(row, candidate, samples)
                times = _latencies(candidate, out, samples[0], warm=True)
                row.latency_ms, row.latency_min_ms = statistics.median(times) * 1000, min(times) * 1000
                row.latency_noise = _spread(times)
                del candidate
                background.start(row, out, remove=True)
            except OnnxSurgeryError as e:
                background.wait()
                row.failed = str(e)
                _remove(out)
    finally:
        background.wait()
        background.pool.shutdown()
    # Timed again at the end, so that a machine warming up or slowing down over the run does not
    # favour the methods: the original's median is over both sets of runs.
    end_times = _latencies(_session(model_path), model_path, samples[0])
    original.latency_ms = statistics.median(original_times + end_times) * 1000
    original.latency_min_ms = min(original_times + end_times) * 1000
    drift = abs(statistics.median(original_times) / statistics.median(end_times) - 1)
    noise = max(MIN_LATENCY_NOISE, _spread(original_times + end_times), drift)
    original.latency_noise = noise
    for row in rows[1:]:  # a row's band: the original's, or its own runs' where they spread more
        if row.latency_noise is not None:
            row.latency_noise = max(noise, row.latency_noise)
    original.exact, original.rel_l2_error, original.max_abs_error = True, 0.0, 0.0
    return rows


class Outputs:
    """The original's outputs on the samples, computed once; `compare` fills a row's errors
    as verify.compare_models computes them (headline outputs: all but a KV cache's)."""

    def __init__(self, sess, samples: list[dict[str, np.ndarray]]):
        self.names = [o.name for o in sess.get_outputs()]
        self.outputs = [_run(sess, self.names, feeds, "the original") for feeds in samples]

    def compare(self, row: Measurement, sess, samples: list[dict[str, np.ndarray]]) -> None:
        headline = headline_outputs(self.names, None)
        exact, worst_l2, worst_abs, agreements = True, 0.0, 0.0, {}
        for feeds, ref in zip(samples, self.outputs):
            got = _run(sess, self.names, feeds, row.key)
            for name, entry in compare_outputs(ref, got, self.names).items():
                exact = exact and entry["exact"]
                if name in headline:
                    worst_l2 = max(worst_l2, entry["rel_l2_error"])
                    worst_abs = max(worst_abs, entry["max_abs_error"])
                if "argmax_agreement" in entry and (name in headline or not is_cache_output(name)):
                    agreements.setdefault(name, []).append(entry)
        row.exact, row.rel_l2_error, row.max_abs_error = exact, worst_l2, worst_abs
        row.argmax_agreement = min(pooled_agreement(v) for v in agreements.values()) if agreements else None


def _session(path: Path):
    try:
        return session(path)
    except VerificationError as e:
        raise VerificationError(f"onnxruntime cannot load {path.name}: {e}") from e


def _run(sess, names: list[str], feeds: dict[str, np.ndarray], what: str) -> list[np.ndarray]:
    try:
        return sess.run(names, feeds)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime failed to run {what}: {runtime_message(e)}") from e


def _make(method: Method, source: Path, out: Path, samples, shapes) -> None:
    if method.command == "shrink":
        shrink_file(source, out, verify=False)
    else:
        quant_file(source, out, verify=False, samples=samples, shapes=shapes, request=method.request)


class _Measuring:
    """A file's sizes (compressed: `_compressed_sizes`) and the memory a session on it adds (in
    a fresh process), measured in two threads while the caller makes the next method's file;
    neither figure is a time, so the work beside them does not change them. `wait` before
    timing anything. The file is removed once measured where `remove` (one made for the report:
    at most two methods' files on disk at a time). SmolLM2's export: 30 s waiting on the fresh
    processes and 18 s compressing, of 132 s, when they ran one after the other."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(2)
        self.pending: tuple | None = None

    def start(self, row: Measurement, path: Path, remove: bool = False) -> None:
        files = _model_files(path)
        row.bytes = sum(f.stat().st_size for f in files)
        limit = MEMORY_LIMIT if streams(path) else None
        self.pending = (row, path, remove, self.pool.submit(measure_in_fresh_process, path, limit),
                        self.pool.submit(_compressed_sizes, files))

    def wait(self) -> None:
        if self.pending is None:
            return
        (row, path, remove, memory, sizes), self.pending = self.pending, None
        try:
            row.gzip_bytes, row.brotli_bytes, row.compressed_estimated = sizes.result()
            try:
                row.memory_bytes = memory.result()["peak_growth"]
            except OverLimit as e:
                row.memory_bytes, row.memory_note = None, str(e)
            except (RuntimeError, OSError, ValueError):  # e.g. no /proc: the other figures still stand
                row.memory_bytes = None
        finally:
            memory.exception()  # both done before the file goes
            if remove:
                _remove(path)


def _remove(path: Path) -> None:
    """A made file and its data file."""
    for made in path.parent.glob(glob.escape(path.name) + "*"):
        if made.is_file():
            made.unlink()


def _model_files(path: Path) -> list[Path]:
    """The model file and the external data files it names (read as every command reads a
    model: the graph parsed, the payloads left in their files)."""
    _, files, _ = open_model(path)
    files.close()
    return [path] + [path.parent / n for n in sorted(files.data_files)]


def _compressed_sizes(files: list[Path]) -> tuple[int, int | None, bool]:
    """gzip -9 and brotli sizes (brotli None when the package is missing), and whether they are
    estimated: files of up to EXACT_COMPRESSION_BYTES are compressed whole, larger ones through
    SAMPLE_PIECES pieces spread evenly over them (`_sampled`)."""
    total = sum(f.stat().st_size for f in files)
    if total <= EXACT_COMPRESSION_BYTES:
        return (*_compress(_chunks(files)), False)
    gz, br = _compress(_sampled(files, total))
    scale = total / (SAMPLE_PIECES * SAMPLE_PIECE_BYTES)
    return round(gz * scale), (round(br * scale) if br is not None else None), True


def _compress(chunks) -> tuple[int, int | None]:
    try:
        import brotli
    except ImportError:
        brotli = None
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    br = brotli.Compressor(quality=BROTLI_QUALITY) if brotli else None
    gz_bytes = br_bytes = 0
    for chunk in chunks:
        gz_bytes += len(gz.compress(chunk))
        if br:
            br_bytes += len(br.process(chunk))
    gz_bytes += len(gz.flush())
    if br:
        br_bytes += len(br.finish())
    return gz_bytes, br_bytes if br else None


def _chunks(files: list[Path]):
    for path in files:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                yield chunk


def _sampled(files: list[Path], total: int):
    """SAMPLE_PIECES pieces of SAMPLE_PIECE_BYTES, evenly spaced over the files taken as one."""
    stride = total / SAMPLE_PIECES
    starts = [int(k * stride) for k in range(SAMPLE_PIECES)]
    offset = 0
    for path in files:
        size = path.stat().st_size
        with open(path, "rb") as f:
            for start in starts:
                if offset <= start < offset + size:
                    f.seek(start - offset)
                    piece = f.read(SAMPLE_PIECE_BYTES)
                    yield piece + _next_bytes(files, path, SAMPLE_PIECE_BYTES - len(piece))
        offset += size


def _next_bytes(files: list[Path], after: Path, n: int) -> bytes:
    """The first `n` bytes of the files after `after` (a piece that runs past a file's end)."""
    out = b""
    for path in files[files.index(after) + 1:]:
        if len(out) >= n:
            break
        with open(path, "rb") as f:
            out += f.read(n - len(out))
    return out


def _spread(times: list[float]) -> float:
    """The interquartile range of `times` over their median (0 for fewer than 4)."""
    if len(times) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4)
    return (q3 - q1) / statistics.median(times)


def _latencies(sess, path: Path, feeds: dict[str, np.ndarray], warm: bool = False) -> list[float]:
    """Seconds per run of `sess` (on the model at `path`), after one warm-up run unless the
    session has run already (`warm`: the comparison's runs were its warm-up)."""
    names = [o.name for o in sess.get_outputs()]
    times: list[float] = []
    try:
        if not warm:
            sess.run(names, feeds)  # first-run allocations are not latency
        start = time.perf_counter()
        while len(times) < MIN_RUNS or (len(times) < MAX_RUNS and time.perf_counter() - start < LATENCY_BUDGET_S):
            t = time.perf_counter()
            sess.run(names, feeds)
            times.append(time.perf_counter() - t)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime failed to run {path.name}: {runtime_message(e)}") from e
    return times
