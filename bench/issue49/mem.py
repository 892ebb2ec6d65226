# ruff: noqa: E501, E701, E702
# Issue 49 scratch measurements (bench/RESULTS.md, "issue 49, items 4 and 6"); files under /tmp/rules.
"""memory at load, float vs default int8, medians of N fresh-process runs, models built in code"""
import sys
import statistics
from pathlib import Path
import onnx
from onnx import helper, numpy_helper, TensorProto
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import builders
import onnxsurgery
from onnxsurgery.session_memory import measure_in_fresh_process

def vi(n, shape, t=TensorProto.FLOAT): return helper.make_tensor_value_info(n, t, shape)
def convs(ch=256, n=6, hw=32, k=3, opset=13):
    inits, nodes, h = [], [], "x"
    for i in range(n):
        inits += [numpy_helper.from_array(builders.rand((ch, ch, k, k), i) * 0.05, f"W{i}"),
                  numpy_helper.from_array(builders.rand((ch,), 100 + i) * 0.1, f"B{i}")]
        nodes += [helper.make_node("Conv", [h, f"W{i}", f"B{i}"], [f"c{i}"], pads=[k // 2] * 4), helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        h = f"r{i}"
    return builders.model(nodes, [vi("x", [1, ch, hw, hw])], [vi(h, [1, ch, hw, hw])], inits, opset=opset)

def matmuls(d=1024, n=6, opset=13):
    inits, nodes, h = [], [], "x"
    for i in range(n):
        inits.append(numpy_helper.from_array(builders.rand((d, d), i) * 0.03, f"M{i}"))
        nodes.append(helper.make_node("MatMul", [h, f"M{i}"], [f"m{i}"])); h = f"m{i}"
    return builders.model(nodes, [vi("x", [1, 16, d])], [vi(h, [1, 16, d])], inits, opset=opset)

def med(path, n):
    v = [measure_in_fresh_process(path)["peak_growth"] for _ in range(n)]
    return statistics.median(v), v

def convs1(): return convs(ch=512, n=6, hw=16, k=1)
def convs_small(): return convs(ch=64, n=8, hw=64, k=3)
MODELS = {"convs1": convs1, "convs_small": convs_small, "convs": convs, "matmuls": matmuls}
if __name__ == "__main__":
    name, runs = sys.argv[1], int(sys.argv[2])
    ext = "ext" in sys.argv[3:]
    d = Path(f"/tmp/rules/mem_{name}{'_ext' if ext else ''}"); d.mkdir(exist_ok=True)
    m = MODELS[name]() if name in MODELS else onnx.load(name)
    src, out = d / "f.onnx", d / "q.onnx"
    if ext:
        onnx.save(m, str(src), save_as_external_data=True, location="f.onnx.data", size_threshold=1024)
    else:
        onnx.save(m, str(src))
    rep = onnxsurgery.quant_file(src, out, verify=False)
    from collections import Counter
    print(Counter((w["dtype"], w["lowering"]) for w in rep.weights))
    f, fv = med(src, runs); q, qv = med(out, runs)
    print(f"{name}{' ext' if ext else ''}: float {f/1e6:.1f} MB {[round(x/1e6,1) for x in fv]}; int8 {q/1e6:.1f} MB {[round(x/1e6,1) for x in qv]}; ratio {q/f:.3f}; weights {sum(w['bytes_before'] for w in rep.weights)/1e6:.1f} MB")
