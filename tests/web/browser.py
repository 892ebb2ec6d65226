"""Run models in onnxruntime-web (WASM) in headless Chromium, from Python: used by the web tests
and by the bench. `npm ci` in this folder first (make test-web does)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np

from server import serve  # noqa: E402  (this folder is on sys.path for its users)

HERE = Path(__file__).resolve().parent


def _tensor(a: np.ndarray) -> dict:
    return {"dtype": str(a.dtype), "dims": list(a.shape), "data": a.ravel().tolist()}


def run_in_browser(models: Path, jobs: list[tuple[str, dict[str, np.ndarray]]], runs: int = 0) -> list[dict]:
    """For each (file name in `models`, inputs): wasm memory before/after session creation, outputs
    (as float64 arrays by name) and, with `runs`, the median latency in ms. Raises RuntimeError
    when Node, the packages or the browser are missing or fail."""
    if shutil.which("node") is None or not (HERE / "node_modules" / "puppeteer-core").is_dir():
        raise RuntimeError("node and tests/web/node_modules are needed: run `make test-web` (it runs npm ci)")
    server, base = serve(models)
    try:
        stdin = "".join(json.dumps({"url": f"/models/{name}", "inputs": {k: _tensor(v) for k, v in feeds.items()},
                                    "runs": runs}) + "\n" for name, feeds in jobs)
        proc = subprocess.run(["node", str(HERE / "run.mjs"), base], input=stdin, capture_output=True, text=True,
                              timeout=600)
    finally:
        server.shutdown()
    if proc.returncode != 0:
        raise RuntimeError(f"the browser run failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in results:
        if r.get("ok"):
            r["outputs"] = {k: np.asarray(v["data"], np.float64).reshape(v["dims"]) for k, v in r["outputs"].items()}
    return results
