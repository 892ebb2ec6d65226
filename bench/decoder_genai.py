"""Issue 36: the quantized onnxruntime-genai export runs in onnxruntime-genai and gives the float
model's greedy text on most prompts.

    .venv/bin/python bench/decoder_genai.py [--runs build/decoder] [--tokens 32]

For each quantized copy of the builder's float export that bench/decoder.py made
(RUNS/q/genai_fp32.*.onnx, with their .data files), a folder is put together the way a user
ships one: the quantized model as the file genai_config.json names, beside the float export's
genai_config.json and tokenizer files (links). onnxruntime-genai then decodes bench/decoder.py's
held-out prompts and its further GREEDY_PROMPTS greedily (its tokenization, chat template
applied; --tokens new tokens), and each text is compared with the float export's: the prompts
whose text is identical, per set and in all, and the tokens before the first difference, on
average. The builder's own int4 export is decoded the same way as a peer.
Prints one Markdown table and writes it to RUNS/decoder_genai_results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from decoder import EVAL_PROMPTS, GREEDY_PROMPTS, WORK, tokenize  # noqa: E402

FLOAT = WORK / "genai_fp32"
BUILDER_INT4 = WORK / "genai_int4"


def shipped_folder(model: Path, dest: Path) -> Path:
    """`model` (and its data file) under the name genai_config.json gives, beside links to the
    float export's config and tokenizer files."""
    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((FLOAT / "genai_config.json").read_text())
    name = config["model"]["decoder"]["filename"]
    for item in FLOAT.iterdir():
        if item.suffix in (".onnx", ".data"):
            continue
        link = dest / item.name
        if not link.exists():
            link.symlink_to(item.resolve())
    (dest / name).unlink(missing_ok=True)
    (dest / name).symlink_to(model.resolve())
    data = model.with_name(model.name + ".data")
    if data.exists():  # the model names its data file by its own name: link it under that name
        (dest / data.name).unlink(missing_ok=True)
        (dest / data.name).symlink_to(data.resolve())
    return dest


def greedy_texts(folder: Path, prompts: list[list[int]], new_tokens: int) -> tuple[list[list[int]], float]:
    """Greedy new tokens per prompt (token ids) from onnxruntime-genai, and the median seconds
    per prompt. The ids come from transformers' tokenizer (bench/decoder.py's chat template):
    onnxruntime-genai's own tokenizer turns the GGUF-derived tokenizer.json's text into -1 ids."""
    import onnxruntime_genai as og

    model = og.Model(str(folder))
    outputs, times = [], []
    for ids in prompts:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(ids) + new_tokens)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(ids)
        while not generator.is_done():
            generator.generate_next_token()
        times.append(time.perf_counter() - start)
        outputs.append([int(t) for t in generator.get_sequence(0)[len(ids):]])
        del generator
    return outputs, sorted(times)[len(times) // 2]


def agreement(reference: list[list[int]], got: list[list[int]]) -> tuple[int, float]:
    """Prompts whose new tokens are identical, and the mean count of tokens before the first
    difference."""
    same = sum(r == g for r, g in zip(reference, got))
    prefix = []
    for r, g in zip(reference, got):
        n = next((i for i, (a, b) in enumerate(zip(r, g)) if a != b), min(len(r), len(g)))
        prefix.append(n)
    return same, sum(prefix) / len(prefix)


def row(label: str, reference: list[list[int]], got: list[list[int]], seconds: float) -> str:
    """A table row: prompts with the reference's text on bench/decoder.py's evaluation prompts,
    on the further greedy prompts, and on both; tokens before the first difference."""
    n = len(EVAL_PROMPTS)
    first, _ = agreement(reference[:n], got[:n])
    more, _ = agreement(reference[n:], got[n:])
    same, prefix = agreement(reference, got)
    return f"| {label} | {first}/{n} + {more}/{len(reference) - n} = {same}/{len(reference)} | {prefix:.1f} " \
           f"| {seconds:.2f} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=WORK, help="bench/decoder.py's --out (its q/ folder)")
    ap.add_argument("--tokens", type=int, default=32)
    args = ap.parse_args()
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        print("decoder_genai: onnxruntime-genai is not installed (pip install -e '.[bench]'): skipped")
        return
    if not (FLOAT / "genai_config.json").exists():
        print(f"decoder_genai: {FLOAT} is missing (run bench/decoder.py first): skipped")
        return
    work = args.runs / "genai_folders"
    prompts = tokenize(EVAL_PROMPTS + GREEDY_PROMPTS, True)
    reference, float_s = greedy_texts(FLOAT, prompts, args.tokens)
    rows = [row("float32 export", reference, reference, float_s)]
    models = [("genai builder -p int4 (own export)", BUILDER_INT4)] if BUILDER_INT4.exists() else []
    models += [(path.name.split(".")[1], path) for path in sorted((args.runs / "q").glob("genai_fp32.*.onnx"))]
    for label, path in models:
        folder = path if path.is_dir() else shipped_folder(path, work / path.stem)
        try:
            got, seconds = greedy_texts(folder, prompts, args.tokens)
        except Exception as e:  # noqa: BLE001 - a model genai cannot run is a row, not a crash
            rows.append(f"| {label} | failed: {str(e).splitlines()[0][:100]} | | |")
            continue
        rows.append(row(label, reference, got, seconds))
    text = "\n".join([
        f"# onnxruntime-genai greedy text, {len(EVAL_PROMPTS)} + {len(GREEDY_PROMPTS)} held-out prompts x "
        f"{args.tokens} new tokens", "",
        f"| model | prompts with the float model's text: the {len(EVAL_PROMPTS)} evaluation prompts + the "
        f"{len(GREEDY_PROMPTS)} more = all | tokens before the first difference (mean, all) "
        "| s per prompt (median) |", "|---|---|---|---|", *rows, "",
        "Variant names are bench/decoder.py's files (q/genai_fp32.NAME.onnx): default (int8), inputs (int8 "
        "--inputs), int4, ort8 / ort4 (--target onnxruntime), nbits4 (onnxruntime's MatMulNBits quantizer).", ""])
    print(text)
    (args.runs / "decoder_genai_results.md").write_text(text)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
