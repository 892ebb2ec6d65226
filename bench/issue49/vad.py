# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
"""score silero variants on several spoken sets. usage: vad.py MODEL [QUANTIZED...]"""
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from accuracy import spoken, _vad_stream, _session, SPOKEN

W = Path("/tmp/rules/audio"); W.mkdir(exist_ok=True, parents=True)
EXTRA = ["Turn left at the next traffic light and keep going.", "Seven large boxes arrived this morning.",
         "She sells sea shells by the sea shore.", "Our meeting moved to the second floor room.",
         "Bring an umbrella, it will rain later today.", "The train to Boston leaves at nine."]
SETS = {"heldout": [(SPOKEN[i], i) for i in range(3)], "tune": [(SPOKEN[3], 3)],
        "B(10-12)": [(SPOKEN[i], 10 + i) for i in range(3)],
        "C": [(EXTRA[i], 20 + i) for i in range(3)], "D": [(EXTRA[3 + i], 30 + i) for i in range(3)]}
_cache = {}
def streams(name):
    if name not in _cache:
        _cache[name] = [spoken(t, s, W) for t, s in SETS[name]]
    return _cache[name]

def score(ref_path, path, sets=None):
    r, q = _session(ref_path), _session(path)
    out = {}
    for name in (sets or SETS):
        errs = []
        for x in streams(name):
            a, b = _vad_stream(r, x)[0], _vad_stream(q, x)[0]
            errs.append(float(np.linalg.norm(b - a) / np.linalg.norm(a)))
        out[name] = max(errs)
    return out

if __name__ == "__main__":
    ref = Path(sys.argv[1])
    for p in sys.argv[2:]:
        s = score(ref, Path(p))
        print(f"{Path(p).name:50s} {Path(p).stat().st_size/1e6:6.3f} MB " + " ".join(f"{k}={v:.4f}" for k, v in s.items()), flush=True)
