# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vad import streams
from accuracy import _session
def stream(sess, x, ctx=64, n=512, gain=1.0):
    x = np.concatenate([np.zeros(ctx, np.float32), x * gain]).astype(np.float32)
    st, p = np.zeros((2, 1, 128), np.float32), []
    for k in range(ctx, x.size - n + 1, n):
        o, st = sess.run(None, {"input": x[None, k - ctx:k + n], "state": st, "sr": np.array(16000)})
        p.append(float(o[0, 0]))
    return np.array(p)
if __name__ == "__main__":
    ref = _session(sys.argv[1])
    for p in sys.argv[2:]:
        q = _session(p)
        for ctx, gain in ((64, 1.0), (0, 1.0), (64, 4.0), (0, 4.0)):
            e = max(np.linalg.norm(stream(q, x, ctx, gain=gain) - (a := stream(ref, x, ctx, gain=gain))) / np.linalg.norm(a)
                    for x in streams("heldout"))
            print(Path(p).name, f"ctx={ctx} gain={gain}: {e:.4f}")
