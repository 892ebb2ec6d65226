"""The peers, each run in a fresh process as its documented entry point (timed there, like ours):

    python zoo/peers.py quantize_dynamic IN OUT     onnxruntime quantize_dynamic, int8 (QInt8)
    python zoo/peers.py matmul_nbits IN OUT         onnxruntime MatMulNBitsQuantizer, int4, block 32, symmetric
    python zoo/peers.py shrink_ray IN OUT           onnx-shrink-ray, int8 per-channel (`-m onnx_shrink_ray.shrink`)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PEERS = {"quantize_dynamic": "int8", "matmul_nbits": "int4", "shrink_ray": "int8"}


def main(argv: list[str]) -> int:
    which, src, out = argv[0], Path(argv[1]), Path(argv[2])
    if which == "quantize_dynamic":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    elif which == "matmul_nbits":
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        q = MatMulNBitsQuantizer(onnx.load(str(src)), bits=4, block_size=32, is_symmetric=True)
        q.process()
        q.model.save_model_to_file(str(out), use_external_data_format=False)
    elif which == "shrink_ray":
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            subprocess.run([sys.executable, "-m", "onnx_shrink_ray.shrink", "-o", tmp, "--per-channel", str(src)],
                           check=True)
            made = Path(tmp) / f"{src.stem}_quantized_weights.onnx"
            shutil.move(str(made), out)
    else:
        raise SystemExit(f"unknown peer {which}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
