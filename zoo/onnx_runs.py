"""The zoo's own onnxruntime runs of a file on a set of samples (the report or the tune set), and
what it computes against the original's runs: shared by zoo/run.py and zoo/command_row.py."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from zoo import decisions, invariants
from zoo.fetch import model_path
from zoo.models import Model


def session(path: Path):
    import onnxruntime as ort

    p = path if path.is_file() else next(path.glob("*.onnx"))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"])


def run_feeds(path: Path, feeds: list[dict]) -> list[dict]:
    s = session(path)
    names = [o.name for o in s.get_outputs()]
    wanted = {i.name for i in s.get_inputs()}
    return [dict(zip(names, s.run(None, {k: v for k, v in f.items() if k in wanted}))) for f in feeds]


def finite(runs: list[dict]) -> bool:
    return all(np.all(np.isfinite(v)) for r in runs for v in r.values() if np.asarray(v).dtype.kind == "f")


@functools.lru_cache(maxsize=None)
def ranked(path: Path) -> dict[str, int]:
    """The model's outputs ranked by a TopK (output -> k), whose rows the zoo's errors match as
    verification does (invariants.output_error); the graph only, no data read."""
    import onnx

    from onnxsurgery.running import ranked_outputs

    p = path if path.is_file() else next(path.glob("*.onnx"))
    return ranked_outputs(onnx.load(str(p), load_external_data=False))


def evaluate(path: Path, ref: list[dict], feeds: list[dict], m: Model) -> dict:
    try:
        new = run_feeds(path, feeds)
    except Exception as e:  # noqa: BLE001 - a file that does not run is a result
        return {"load_error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    return invariants.compare_runs(ref, new, getattr(decisions, m.decision), feeds, ranked(model_path(m)))


def load_memory(path: Path) -> int | None:
    """What onnxruntime holds once it has loaded `path` (peak growth of a fresh process creating a
    default CPU session, folding and all: running/session_memory.py), or None where it fails."""
    from onnxsurgery.running.session_memory import measure_in_fresh_process

    try:
        return measure_in_fresh_process(path)["peak_growth"]
    except Exception:  # noqa: BLE001 - a figure missing from a table, not a failed run
        return None
