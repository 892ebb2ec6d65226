# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
"""LSTM whose W and R are reordered from a stored weight by Slice -> Concat (as silero-vad's op15 export)."""
from pathlib import Path
import sys
import statistics
import json
import subprocess
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import builders
import onnx
import numpy as np
from onnx import helper, numpy_helper
from onnxsurgery.session_memory import measure_in_fresh_process
import onnxsurgery
H = int(sys.argv[1]) if len(sys.argv) > 1 else 256
def model():
    nodes, inits = [], []
    for name, seed in (("w_ih", 1), ("w_hh", 2)):
        inits.append(numpy_helper.from_array(builders.rand((4 * H, H), seed) * 0.05, name))
        parts = []
        for k, (a, b) in enumerate(((2 * H, 3 * H), (0, 2 * H), (3 * H, 4 * H))):
            for nm, v in (("s", a), ("e", b)):
                inits.append(numpy_helper.from_array(np.array([v], np.int64), f"{name}_{nm}{k}"))
            inits.append(numpy_helper.from_array(np.array([0], np.int64), f"{name}_ax{k}")) if False else None
            nodes.append(helper.make_node("Slice", [name, f"{name}_s{k}", f"{name}_e{k}"], [f"{name}_p{k}"]))
            parts.append(f"{name}_p{k}")
        nodes.append(helper.make_node("Concat", parts, [f"{name}_c"], axis=0))
        nodes.append(helper.make_node("Unsqueeze", [f"{name}_c", "zero"], [f"{name}_u"]))
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "zero"))
    nodes.append(helper.make_node("LSTM", ["x", "w_ih_u", "w_hh_u"], ["y"], hidden_size=H))
    return builders.model(nodes, [builders.vi("x", shape=[4, 1, H])], [builders.vi("y", shape=[4, 1, 1, H])], inits, opset=13)
onnx.save(model(), "/tmp/rules/lstm.onnx")
rep = onnxsurgery.quant_file("/tmp/rules/lstm.onnx", "/tmp/rules/lstm_q.onnx", verify=True, min_elements=1024)
print([(w["name"], w["lowering"], w["why"][:60]) for w in rep.weights if w["dtype"] != "float"], rep.verification.get("rel_l2_error"))
plan = json.loads(subprocess.run(["/work/main/.venv/bin/python", "-m", "onnxsurgery", "-q", "quant", "/tmp/rules/lstm.onnx", "--dry-run", "--json", "--min-elements", "1024"], capture_output=True, text=True, cwd="/tmp").stdout)
for r in plan["weights"]:
    if r["dtype"] == "int8": r.update(lowering="dq")
json.dump(plan, open("/tmp/rules/lp.json", "w"))
subprocess.run(["/work/main/.venv/bin/python", "-m", "onnxsurgery", "-q", "quant", "/tmp/rules/lstm.onnx", "/tmp/rules/lstm_dq.onnx", "--plan", "/tmp/rules/lp.json", "--no-verify"], cwd="/tmp", check=True)
f = None
for p in ("/tmp/rules/lstm.onnx", "/tmp/rules/lstm_q.onnx", "/tmp/rules/lstm_dq.onnx"):
    v = [measure_in_fresh_process(p)["peak_growth"] for _ in range(5)]
    f = f or statistics.median(v)
    print(p, f"{statistics.median(v)/1e6:.2f} MB {statistics.median(v)/f:.3f}x; extra per weight byte {(statistics.median(v)-f)/(2*16*H*H):+.2f}", [round(x/1e6,2) for x in v])
