"""The weight quantizers a user would pick instead of `onnxsurgery quant`, each run as its
documented entry point, writing one file per setting: onnxruntime's quantize_dynamic and
MatMulNBitsQuantizer (RTN), onnx-shrink-ray, and NNCF's compress_weights (in a venv of its
own, build/nncf-venv: it pins its own onnx; models below opset 13, which it refuses, upgraded
with onnx's version converter first, as its error message asks). Each yields (label, bits, path or None, why)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NNCF_VENV = ROOT / "build" / "nncf-venv"
NNCF_SPEC = "nncf==3.4.0"

_NNCF_SCRIPT = """
import sys, onnx, nncf
from onnx import version_converter
src, dst, mode, skip = sys.argv[1:5]
model = onnx.load(src)
if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:  # NNCF refuses older ones
    model = version_converter.convert_version(model, 13)
extra = dict(group_size=32, ratio=1.0) if "INT4" in mode else {}
if skip:  # what a user does when NNCF's Conv weights fail to load (see nncf() below)
    extra["ignored_scope"] = nncf.IgnoredScope(types=skip.split(","))
onnx.save(nncf.compress_weights(model, mode=getattr(nncf.CompressWeightsMode, mode), **extra), dst)
"""


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:70]


def ort_dynamic(src: Path, work: Path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for per_channel in (False, True):
        label = f"ort quantize_dynamic{' per-channel' if per_channel else ''}"
        out = work / f"{src.stem}.dynamic{'_pc' if per_channel else ''}.onnx"
        try:
            quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=per_channel)
            yield label, 8, out, ""
        except Exception as e:  # noqa: BLE001 - its own failure, reported in the table
            yield label, 8, None, _first_line(str(e))


def ort_matmul_nbits(src: Path, work: Path):
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    for bits in (8, 4):
        for symmetric in (True, False):
            label = f"ort matmul_nbits {bits}-bit {'sym' if symmetric else 'asym'} (blocks 32)"
            out = work / f"{src.stem}.nbits{bits}{'s' if symmetric else 'a'}.onnx"
            try:
                q = MatMulNBitsQuantizer(onnx.load(str(src)), bits=bits, block_size=32, is_symmetric=symmetric)
                q.process()
                out.unlink(missing_ok=True)
                q.model.save_model_to_file(str(out), use_external_data_format=False)
                yield label, bits, out, ""
            except Exception as e:  # noqa: BLE001
                yield label, bits, None, _first_line(str(e))


def shrink_ray(src: Path, work: Path):
    for per_channel in (False, True):
        label = f"onnx-shrink-ray int8{' per-channel' if per_channel else ''}"
        folder = work / f"shrink_ray{'_pc' if per_channel else ''}"
        args = ["--per-channel"] if per_channel else []
        r = subprocess.run([sys.executable, "-m", "onnx_shrink_ray.shrink", "-o", str(folder), *args, str(src)],
                           capture_output=True, text=True)
        made = folder / f"{src.stem}_quantized_weights.onnx"
        out = work / f"{src.stem}.shrink_ray{'_pc' if per_channel else ''}.onnx"
        if r.returncode == 0 and made.exists():
            made.replace(out)
            yield label, 8, out, ""
        else:
            yield label, 8, None, _first_line(r.stderr)


def nncf_python() -> Path | None:
    python = NNCF_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing {NNCF_SPEC} into {NNCF_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(NNCF_VENV)], check=True)
        r = subprocess.run([str(python), "-m", "pip", "install", "-q", NNCF_SPEC, "onnx", "onnxruntime"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("  install failed:", _first_line(r.stderr))
            return None
    return python


def nncf(src: Path, work: Path):
    """NNCF 3.4's weight compression, each mode; for a model with Conv nodes, also with Conv left
    out: NNCF writes a Conv weight's per-channel scales as [C, 1, 1, 1], which DequantizeLinear
    rejects (a per-axis scale is 1-D), so its output with them does not load in onnxruntime."""
    import onnx

    python = nncf_python()
    has_conv = any(n.op_type == "Conv" for n in onnx.load(str(src), load_external_data=False).graph.node)
    for mode, bits in (("INT8_ASYM", 8), ("INT8_SYM", 8), ("INT4_SYM", 4), ("INT4_ASYM", 4)):
        for skip in ("", "Conv") if has_conv else ("",):
            # int4: embeddings and the last layer stay int8, its default; with all_layers=True its
            # MiniLM output fails to load (it turns the word table's Gather into MatMulNBits)
            label = f"nncf {mode.lower()}" + (" (groups 32)" if bits == 4 else "")
            label += ", Conv left float" if skip else ""
            if python is None:
                yield label, bits, None, f"{NNCF_SPEC} did not install"
                continue
            out = work / f"{src.stem}.nncf_{mode.lower()}{'_noconv' if skip else ''}.onnx"
            r = subprocess.run([str(python), "-c", _NNCF_SCRIPT, str(src), str(out), mode, skip],
                               capture_output=True, text=True)
            yield label, bits, out if r.returncode == 0 and out.exists() else None, _first_line(r.stderr)


def all_alternatives(src: Path, work: Path):
    for tool in (ort_dynamic, ort_matmul_nbits, shrink_ray, nncf):
        yield from tool(src, work)
