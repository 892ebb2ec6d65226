"""Every command's memory is bounded by the largest tensor, not the model (issue 48).

One model built in code, 404 MB in a data file: 48 distinct [1024, 2048] float32 MatMul weights
(8 MiB each), the first 16 of them exact in float16 (shrink's half-width pass rewrites them)
and 8 of them written twice under other names (shrink merges them). Each command runs in a
fresh process (tests/memory_probe.py) and its peak anonymous memory (RssAnon of the process
and its children: what it cannot give back; the mapped model's file pages do not count) must
stay within the interpreter's own baseline plus a constant plus a few times the largest
tensor. Loading every weight once (404 MB) breaks every bound here, so a regression to
whole-model loading fails; wall times are not asserted (machines are noisy)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "samples"))
from external_data import DataFileWriter  # noqa: E402
from memory_probe import peak_anon, probe  # noqa: E402 - tests/ on sys.path

HIDDEN, WIDE, LAYERS, EXACT_HALF, DUPLICATES = 1024, 2048, 48, 16, 8
LARGEST = HIDDEN * WIDE * 4
# What a command may hold beyond the baseline: its working set around the tensors in flight (a
# float copy, the quantized result, rounding temporaries; two weights at once, parallel.py: a
# few times LARGEST) and a fixed slack for the graph, the batches of payloads waiting to move to
# disk (lazy.OFFLOAD_EVERY_BYTES, 32 MiB) and onnxruntime's buffers.
SLACK = 128 * 2**20
TIMES_LARGEST = 8


def _write_model(folder: Path) -> Path:
    """The model of the module docstring, written weight by weight (never all in memory)."""
    rng = np.random.default_rng(0)
    model_path, data_path = folder / "big.onnx", folder / "big.data"
    nodes = []
    with DataFileWriter(data_path) as data:
        x = "x"
        for layer in range(LAYERS // 2):
            up = rng.standard_normal((HIDDEN, WIDE), dtype=np.float32) * 0.03
            down = rng.standard_normal((WIDE, HIDDEN), dtype=np.float32) * 0.03
            if 2 * layer < EXACT_HALF:
                up, down = up.astype(np.float16).astype(np.float32), down.astype(np.float16).astype(np.float32)
            for i, (kind, w) in enumerate((("up", up), ("down", down))):
                name = data.add(f"layer{layer}.{kind}", w).name
                nodes.append(helper.make_node("MatMul", [x, name], [f"layer{layer}_{kind}"]))
                x = f"layer{layer}_{kind}"
                if i == 0:
                    nodes.append(helper.make_node("Relu", [x], [f"{x}_relu"]))
                    x = f"{x}_relu"
            if layer < DUPLICATES // 2:  # the same bytes again, under other names, read by a side branch
                for kind, w in (("up", up), ("down", down)):
                    copy = data.add(f"copy{layer}.{kind}", w).name
                    nodes.append(helper.make_node("MatMul", [f"side{layer}" if kind == "down" else x, copy],
                                                  [f"side{layer}" if kind == "up" else f"side{layer}_out"]))
                nodes.append(helper.make_node("Add", [x, f"side{layer}_out"], [f"layer{layer}_mix"]))
                x = f"layer{layer}_mix"
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, HIDDEN])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4, HIDDEN])], data.tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model_path.write_bytes(model.SerializeToString())
    return model_path


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return _write_model(tmp_path_factory.mktemp("big"))


@pytest.fixture(scope="module")
def bound(tmp_path_factory) -> int:
    """The interpreter's baseline (onnxsurgery, onnx, onnxruntime and numpy imported, a tiny
    model run), plus the slack and a few times the largest tensor."""
    folder = tmp_path_factory.mktemp("tiny")
    tiny = folder / "tiny.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tiny)
    baseline = max(peak_anon("run", tiny), peak_anon("quant", tiny, folder / "q.onnx"))
    return baseline + SLACK + TIMES_LARGEST * LARGEST


def test_the_model_is_larger_than_every_bound(big, bound):
    """The premise: holding every weight once would break the bound."""
    weights = (big.parent / "big.data").stat().st_size
    assert weights > 400e6
    assert weights > bound


COMMANDS = {
    "info": ["info", "{big}"],
    "shrink": ["shrink", "{big}", "{out}"],
    "shrink --verify": ["shrink", "{big}", "{out}", "--verify"],
    "npy": ["npy", "{big}", "{out}", "--min-bytes", "0"],
    "npy --external-data": ["npy", "{big}", "{out}", "--min-bytes", "0", "--external-data"],
    "run (npy model)": ["run", "{npy}"],
    "compare (npy model)": ["compare", "{big}", "{npy}"],
    "embed": ["embed", "{npy}", "{out}"],
    "run": ["run", "{big}"],
    "compare": ["compare", "{big}", "{big}"],
    "quant": ["quant", "{big}", "{out}"],
    "quant --no-verify": ["quant", "{big}", "{out}", "--no-verify"],
    "quant --dry-run": ["quant", "{big}", "--dry-run"],
    "quant --dtype int4": ["quant", "{big}", "{out}", "--dtype", "int4"],
    "quant --dtype int4 --target onnxruntime": ["quant", "{big}", "{out}", "--dtype", "int4", "--target",
                                                "onnxruntime"],
    "quant --keep-quantized": ["quant", "{big}", "{out}", "--keep-quantized"],
    "quant --target tensorrt": ["quant", "{big}", "{out}", "--target", "tensorrt"],
    "quant --memory 0.2": ["quant", "{big}", "{out}", "--memory", "0.2"],
}


@pytest.fixture(scope="module")
def npy_model(big, tmp_path_factory) -> Path:
    """`big` with every weight moved to a .npy file."""
    import onnxsurgery

    out = tmp_path_factory.mktemp("npy") / "n.onnx"
    onnxsurgery.npy_file(big, out, min_bytes=0)
    return out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_peak_memory_is_bounded_by_the_largest_tensor(big, npy_model, bound, tmp_path, command):
    out = tmp_path / "out.onnx"
    args = [a.format(big=big, out=out, npy=npy_model) for a in COMMANDS[command]]
    measured = probe(*args, kill_above=2 * bound)
    assert measured.peak_anon <= bound, (
        f"{command}: peak anonymous memory {measured.peak_anon / 2**20:.0f} MiB, bound {bound / 2**20:.0f} MiB "
        f"(model {(big.parent / 'big.data').stat().st_size / 2**20:.0f} MiB)")
    if "--dry-run" not in args and args[0] not in ("info", "run", "compare"):
        assert out.exists()


def test_the_results_of_a_run_within_bounds_compute_what_the_model_did(big, tmp_path):
    """shrink's result (merged, half-width, its new payloads moved out of memory and back) is
    bit-identical; quant's is verified in streamed sessions, and says so."""
    import onnxsurgery

    shrunk = tmp_path / "s.onnx"
    report = onnxsurgery.shrink_file(big, shrunk, verify=True)
    assert report.verification["exact"] and report.verification["streamed"]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) < 0.8 * (big.parent / "big.data").stat().st_size
    names = [p.name for p in report.passes if p.changed]
    assert "merge_duplicates" in names[0] and "half_width" in names
    quantized = onnxsurgery.quant_file(big, tmp_path / "q.onnx")
    assert quantized.verification["streamed"] and "streamed" in quantized.verification["runtime"]
    assert quantized.verification["rel_l2_error"] < 0.05


def test_an_int8_result_too_large_for_memory_stays_quantized_at_load(big, tmp_path):
    """--memory below the float weights: every weight is DequantizeLinear (fused by onnxruntime
    into MatMulNBits where one MatMul reads it), none in a form that turns float at load, and
    the plan says why."""
    out = tmp_path / "q.onnx"
    probe("quant", big, out, "--memory", "0.2", "--no-verify")
    model = onnx.load(out, load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("DequantizeLinear") == LAYERS  # the copies merged into the weights first
    assert "Cast" not in ops
    import onnxsurgery

    plan = onnxsurgery.quant_plan(big, memory=int(0.2e9))
    assert all(r.why.startswith("kept quantized at load") and r.lowering == "dq" for r in plan.changed)
    fused = [r.name for r in plan.changed if "MatMulNBits" in r.why]  # one MatMul reads it: fused
    # ... unless a Relu alone reads its MatMul (each layer's up): the why says it runs (nbits_fusion.py)
    assert len(fused) == (LAYERS - DUPLICATES) // 2 and not any(name.startswith("layer0.") for name in fused)
    assert all(name.endswith(".down") for name in fused)
