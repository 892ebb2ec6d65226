# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
"""quantize one weight at a time (its default record, or alternative forms); score on every set."""
import json
import subprocess
import sys
import copy
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent)); sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from vad import score
from vad2 import stream
from vad import streams
from accuracy import _session
model, planf, tag = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
forms = sys.argv[4].split(",") if len(sys.argv) > 4 else ["default"]
plan = json.load(open(planf))
PY = "/work/main/.venv/bin/python"
FLOAT = dict(dtype="float", granularity=None, block_size=None, axis=None, symmetric=None, lowering=None, rounding=None, levels=None)
FORMS = {"f16": dict(dtype="float16", lowering="cast"),
         "ch_dq_asym": dict(dtype="int8", granularity="channel", lowering="dq", symmetric=False, rounding="nearest", axis=None),
         "ch_dq_sym": dict(dtype="int8", granularity="channel", lowering="dq", symmetric=True, rounding="nearest", axis=None),
         "ch_arith_asym": dict(dtype="int8", granularity="channel", lowering="arith", symmetric=False, rounding="nearest", axis=None),
         "ch_arith_sym": dict(dtype="int8", granularity="channel", lowering="arith", symmetric=True, rounding="nearest", axis=None),
         "sc_asym": dict(dtype="int8", granularity="channel", lowering="scaled", symmetric=False, rounding="balanced", axis=0),
         "sc_asym_near": dict(dtype="int8", granularity="channel", lowering="scaled", symmetric=False, rounding="nearest", axis=0),
         "blk32_asym": dict(dtype="int8", granularity="block", block_size=32, lowering="arith", symmetric=False, rounding="nearest", axis=None)}
changed = [r for r in plan["weights"] if r["dtype"] != "float" and (len(sys.argv) < 6 or r["name"] in sys.argv[5].split(","))]
ref = _session(model)
def loud(q):
    return max(np.linalg.norm(stream(q, x, gain=4.0) - (a := stream(ref, x, gain=4.0))) / np.linalg.norm(a) for x in streams("heldout"))
for r in changed:
    for form in forms:
        p = copy.deepcopy(plan)
        for o in p["weights"]:
            if o["name"] != r["name"]:
                o.update(FLOAT)
            elif form != "default":
                o.update(FLOAT); o.update(FORMS[form])
        pf = f"/tmp/rules/p_{tag}.json"; json.dump(p, open(pf, "w"))
        out = f"/tmp/rules/one_{tag}.onnx"
        rr = subprocess.run([PY, "-m", "onnxsurgery", "-q", "quant", str(model), out, "--plan", pf, "--no-verify"],
                            capture_output=True, text=True)
        if rr.returncode:
            print(r["name"], form, "FAILED", rr.stderr.strip().splitlines()[-1][:150]); continue
        s = score(model, out); s["loud"] = loud(_session(out))
        print(f"{r['name'][-38:]:38s} {form:14s} " + " ".join(f"{k}={v:.4f}" for k, v in s.items()), flush=True)
