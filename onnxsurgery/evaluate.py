"""Each method's file, made and measured where it runs: what `report` shows.

For every method (shrink, quant int8, int4, --keep-quantized, --fp16, --levels) the file is
made with the same API call its CLI command makes, into a scratch folder, then measured:
bytes on disk and after gzip and brotli (what a download costs), output error against the
original on the same inputs, median latency, and the memory that creating an onnxruntime CPU
session adds (peak RSS growth in a fresh process, session_memory.py). A method that fails on
the model gives a row that says why instead of figures; the others still run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .api import quant_file, shrink_file
from .defaults import METHOD_KEYS as METHOD_KEYS  # re-exported: what `report` measures
from .errors import OnnxSurgeryError, VerificationError
from .io import open_model
from .progress import progress
from .quant.request import QuantRequest
from .session_memory import measure_in_fresh_process
from .verify import compare_models, make_inputs, session

# Latency: at least this many timed runs after one warm-up, more while within the time budget.
MIN_RUNS, MAX_RUNS, LATENCY_BUDGET_S = 3, 20, 2.0
BROTLI_QUALITY = 5  # what servers use compressing on the fly; 9 took 11 s on 16 MB, 11 took 67 s


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
    exact: bool | None = None
    rel_l2_error: float | None = None
    max_abs_error: float | None = None
    argmax_agreement: float | None = None  # the lowest over outputs that have one
    latency_ms: float | None = None
    memory_bytes: int | None = None
    failed: str | None = None  # why there are no figures

    def to_dict(self) -> dict:
        return asdict(self)


def measure_methods(model_path: str | os.PathLike, scratch: str | os.PathLike, *,
                    methods: tuple[Method, ...] = METHODS, samples: list[dict[str, np.ndarray]] | None = None,
                    shapes: dict[str, list[int]] | None = None, inputs_file: str | None = None,
                    shape_specs: tuple[str, ...] = ()) -> list[Measurement]:
    """The original's figures first, then one Measurement per method, in order. `samples`
    (else one generated sample) feed every run; `inputs_file` and `shape_specs` only go into
    the printed commands, so that each row's command makes that row's file."""
    model_path, scratch = Path(model_path), Path(scratch)
    if samples is None:
        samples = [make_inputs(session(model_path, map_weights=True), shapes=shapes, model=model_path)]
    extra = ([f"--inputs {shlex.quote(inputs_file)}"] if inputs_file else []) + [f"--shape {s}" for s in shape_specs]
    original = Measurement("original", "the input, as it is", "")
    _measure_file(original, model_path, samples)
    original_times = _latencies(model_path, samples[0])
    rows = [original]
    for method in progress(list(methods), "report", unit="method"):
        out = scratch / f"{model_path.stem}.{method.key}.onnx"
        cli = ["onnxsurgery", method.command, shlex.quote(str(model_path)), shlex.quote(out.name), *method.flags]
        row = Measurement(method.key, method.what, " ".join(cli + (extra if method.command == "quant" else [])))
        try:
            _make(method, model_path, out, samples, shapes)
            errors = compare_models(model_path, out, samples=samples)
            row.exact, row.rel_l2_error, row.max_abs_error = errors["exact"], errors["rel_l2_error"], \
                errors["max_abs_error"]
            agreements = [o["argmax_agreement"] for o in errors["outputs"].values() if "argmax_agreement" in o]
            row.argmax_agreement = min(agreements) if agreements else None
            _measure_file(row, out, samples)
        except OnnxSurgeryError as e:
            row.failed = str(e)
        finally:  # one method's files on disk at a time
            for path in scratch.iterdir():
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        rows.append(row)
    # Timed again at the end, so that a machine warming up or slowing down over the run does not
    # favour the methods: the original's median is over both sets of runs.
    original.latency_ms = statistics.median(original_times + _latencies(model_path, samples[0])) * 1000
    original.exact, original.rel_l2_error, original.max_abs_error = True, 0.0, 0.0
    return rows


def _make(method: Method, source: Path, out: Path, samples, shapes) -> None:
    if method.command == "shrink":
        shrink_file(source, out, verify=False)
    else:
        quant_file(source, out, verify=False, samples=samples, shapes=shapes, request=method.request)


def _measure_file(row: Measurement, path: Path, samples) -> None:
    files = _model_files(path)
    row.bytes = sum(f.stat().st_size for f in files)
    row.gzip_bytes, row.brotli_bytes = _compressed_sizes(files)
    try:
        row.memory_bytes = measure_in_fresh_process(path)["peak_growth"]
    except (RuntimeError, OSError, ValueError):  # e.g. no /proc: the other figures still stand
        row.memory_bytes = None
    if row.key != "original":
        row.latency_ms = statistics.median(_latencies(path, samples[0])) * 1000


def _model_files(path: Path) -> list[Path]:
    """The model file and the external data files it names (read as every command reads a
    model: the graph parsed, the payloads left in their files)."""
    _, files, _ = open_model(path)
    files.close()
    return [path] + [path.parent / n for n in sorted(files.data_files)]


def _compressed_sizes(files: list[Path]) -> tuple[int, int | None]:
    """gzip -9 and brotli sizes, streamed in chunks; brotli None when the package is missing."""
    try:
        import brotli
    except ImportError:
        brotli = None
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    br = brotli.Compressor(quality=BROTLI_QUALITY) if brotli else None
    gz_bytes = br_bytes = 0
    for path in files:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                gz_bytes += len(gz.compress(chunk))
                if br:
                    br_bytes += len(br.process(chunk))
    gz_bytes += len(gz.flush())
    if br:
        br_bytes += len(br.finish())
    return gz_bytes, br_bytes if br else None


def _latencies(path: Path, feeds: dict[str, np.ndarray]) -> list[float]:
    """Seconds per run, after one warm-up run."""
    sess = session(path)
    names = [o.name for o in sess.get_outputs()]
    times: list[float] = []
    try:
        sess.run(names, feeds)  # warm-up: first-run allocations are not latency
        start = time.perf_counter()
        while len(times) < MIN_RUNS or (len(times) < MAX_RUNS and time.perf_counter() - start < LATENCY_BUDGET_S):
            t = time.perf_counter()
            sess.run(names, feeds)
            times.append(time.perf_counter() - t)
    except Exception as e:  # onnxruntime raises its own exception types
        raise VerificationError(f"onnxruntime failed to run {path.name}: {str(e).splitlines()[0]}") from e
    return times
