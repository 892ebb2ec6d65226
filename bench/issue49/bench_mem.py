# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
"""float / main / rules: memory median of N fresh processes, latency median, for one model."""
import sys
import statistics
import subprocess
import time
import os
from pathlib import Path
import numpy as np
import onnxruntime as ort
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from onnxsurgery.session_memory import measure_in_fresh_process
src, tag, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]); extra = sys.argv[4:]
PY = "/work/main/.venv/bin/python"
paths = {"float": src}
for code in ("/work/main", "/work/wt-rules"):
    out = Path(f"/tmp/rules/bm_{tag}_{Path(code).name}.onnx")
    r = subprocess.run([PY, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), "--no-verify", *extra], cwd="/tmp",
                       env=dict(os.environ, PYTHONPATH=code), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-500:]
    paths[Path(code).name] = out
def feeds(sess):
    f = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.name == "sr": f[i.name] = np.array(16000); continue
        if i.name == "state": f[i.name] = np.zeros((2, 1, 128), np.float32); continue
        if i.name == "input" and "silero" in str(src): f[i.name] = np.random.default_rng(0).standard_normal((1, 576)).astype(np.float32) * 0.1; continue
        if "int64" in i.type: f[i.name] = np.ones(shape, np.int64); continue
        if len(shape) == 4 and "det" in str(src): shape = [1, 3, 320, 320]
        if len(shape) == 4 and shape[2] == 1: shape[2] = 48
        if len(shape) == 4 and shape[3] == 1: shape[3] = 320
        f[i.name] = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return f
res = {}
for k, p in paths.items():
    mem = [measure_in_fresh_process(p)["peak_growth"] for _ in range(n)]
    o = ort.SessionOptions(); o.log_severity_level = 3; o.intra_op_num_threads = 1
    s = ort.InferenceSession(str(p), o, providers=["CPUExecutionProvider"]); fd = feeds(s)
    for _ in range(3): s.run(None, fd)
    ts = []
    for _ in range(15):
        t = time.perf_counter(); s.run(None, fd); ts.append(time.perf_counter() - t)
    res[k] = (statistics.median(mem), statistics.median(ts), p.stat().st_size)
    print(k, [round(m / 1e6, 1) for m in mem], flush=True)
fm, ft, _ = res["float"]
for k, (m, t, size) in res.items():
    print(f"{tag:12s} {k:9s} {size/1e6:6.2f} MB  mem {m/1e6:7.1f} MB {m/fm:5.2f}x  latency {t*1e3:7.2f} ms {t/ft:5.2f}x", flush=True)
