"""Invariant 17: the kernels a report names are the ones that ran. `quant`'s verification header says
how its errors were computed, and where it says "DequantizeLinear -> MatMul fused into MatMulNBits
with int8 activations", the errors include onnxruntime's quantized activations. Found 2026-12-01
(twenty-fifth round, tglf_multimachine): the header said so for any DequantizeLinear read by a
MatMul, and its 3-D ensemble weights ([5, 512, 512]) are never fused: every MatMul ran in float
(onnxsurgery/running/labels.py now names the fusion where onnxruntime makes it). No invariant read
the header against the session: the figures were right, the words about them were not.
Thirty-sixth round: it failed on tumor_vgg16 and capspot_siamese `--dtype int4`, tf2onnx Dense layers
(MatMul -> Add of a [N] bias -> Relu, the Relu read once): onnxruntime's QDQ fusion takes such a node
for a quantized activation's, waits for a QuantizeLinear after the Relu and, with none, fuses nothing
(labels.py's _Graph now follows its order).

`fusions_made` asks onnxruntime itself, in a child process: a default CPU session of the written
model saves its optimized graph, and the MatMulNBits there that the written file did not hold are
the fusions made. `named_honestly` is the invariant, pure, on the header and that count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLAIM = "fused into MatMulNBits"

PROBE = """import sys, tempfile, os, onnx, onnxruntime as ort
path = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    options = ort.SessionOptions()
    options.optimized_model_filepath = os.path.join(d, "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    def count(p):
        return sum(n.op_type == "MatMulNBits" for n in onnx.load(p, load_external_data=False).graph.node)
    print(count(options.optimized_model_filepath) - count(path))
"""


def fusions_made(path: Path, timeout: float = 300) -> int | None:
    """MatMulNBits nodes a default onnxruntime session made of `path` (a file, or a folder's .onnx):
    those of its optimized graph less those of the file; None where no session could be made."""
    model = next(path.glob("*.onnx")) if path.is_dir() else path
    r = subprocess.run([sys.executable, "-c", PROBE, str(model.resolve())], capture_output=True, text=True,
                       timeout=timeout, cwd=str(model.parent))
    try:
        return int(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    except (ValueError, IndexError):
        return None


def named_honestly(command: str, runtime: str, fused: int | None) -> list[str]:
    """The invariant, pure: `runtime` the verification's header (or --json's "runtime"), `fused`
    what fusions_made counted for the model it verified. A header that names the fusion where the
    session made none fails, and so does one silent about fusions that were made; None: no session,
    nothing to judge (invariants 2 and 15 say why). Only a header that says it ran a default
    session is judged (streamed, TensorRT's and onnxruntime-web's arithmetic are emulated on purpose)."""
    if fused is None or "default graph optimizations" not in runtime:
        return []
    if CLAIM in runtime and fused == 0:
        return [f"{command}: its report says DequantizeLinear -> MatMul was fused into MatMulNBits (int8 "
                f"activations), and a default onnxruntime session fused none"]
    if CLAIM not in runtime and fused > 0 and "MatMulNBits" not in runtime:
        return [f"{command}: onnxruntime fused {fused} DequantizeLinear -> MatMul into MatMulNBits (int8 "
                f"activations), and its report does not say so"]
    return []


def judged(command: str, stdout: str, written: Path) -> list[str]:
    """The invariant on one run of a quant command: its verification header (the stdout line that
    opens with "verification (") against the fusions a default session makes of the written file."""
    header = next((line for line in stdout.splitlines() if line.strip().startswith("verification (")), "")
    if "default graph optimizations" not in header:
        return []  # no verification, or an emulated runtime / streamed session: nothing to judge
    return named_honestly(command, header, fusions_made(written))
