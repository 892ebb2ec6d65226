"""Output error against block size on ALBERT-base, measured on its two logits and on its
encoder's sequence output (64 tokens x 768).

Issue 18 reported that int4 blocks of 128 beat blocks of 32 on ALBERT, which pointed at a
defect. The logits of this model (random weights, a two-class head) depend on which way single
weights round; the sequence output behind them does not. This prints both, one row per scheme,
so that the block size is judged on the figure that can tell."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from runtime import fetch_models, task_inputs  # noqa: E402

import onnxsurgery  # noqa: E402

# the last LayerNorm's output: what the pooler's Gather reads
POOLER_GATHER = "/model/albert/Gather_5_output_0"


def session_with_sequence_output(model: onnx.ModelProto, sequence: str) -> ort.InferenceSession:
    model.graph.output.append(helper.make_tensor_value_info(sequence, onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def worst_rel_l2(got, ref) -> float:
    return max(float(np.linalg.norm(g - r) / np.linalg.norm(r)) for g, r in zip(got, ref))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "build" / "models")
    args = ap.parse_args()
    src = fetch_models(args.models).get("albert_base")
    if src is None:
        print("block_sizes: ALBERT-base was not exported (transformers/torch missing)")
        return
    original = onnx.load(str(src))
    sequence = next(n.input[0] for n in original.graph.node if n.output[0] == POOLER_GATHER)
    samples = task_inputs("albert_base", src, args.models)
    ref_session = session_with_sequence_output(original, sequence)
    del original
    ref = [ref_session.run(None, s) for s in samples]
    out = args.models / "block_sizes.onnx"
    print(f"ALBERT-base, onnxruntime {ort.__version__}, worst relative L2 over {len(samples)} inputs of 64 tokens")
    print(f"{'dtype':6s} {'block':>5s} {'':5s} {'logits (2)':>10s} {'sequence (64x768)':>18s}")
    for dtype in ("int4", "int8"):
        for block in (16, 32, 64, 128):
            for symmetric in (False, True):
                onnxsurgery.quant_file(src, out, dtype=dtype, granularity="block", block_size=block,
                                       symmetric=symmetric, verify=False)
                sess = session_with_sequence_output(onnx.load(str(out)), sequence)
                got = [sess.run(None, s) for s in samples]
                logits = worst_rel_l2([g[0] for g in got], [r[0] for r in ref])
                seq = worst_rel_l2([g[1] for g in got], [r[1] for r in ref])
                scheme = "sym" if symmetric else "asym"
                print(f"{dtype:6s} {block:5d} {scheme:5s} {logits:10.4f} {seq:18.4f}", flush=True)
    out.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
