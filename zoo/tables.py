"""The zoo's tables in docs/benchmarks.md ("Zoo"), from zoo/run.py's results: one row per model
of each command's time, error and decisions beside the peers; and the int8 defaults against the
data-free peers by error, file and the memory onnxruntime holds once the file is loaded."""

from __future__ import annotations

from pathlib import Path

from zoo import timing
from zoo.models import SKIPPED

ROOT = Path(__file__).resolve().parent.parent


def _t(x):
    return "-" if x is None else f"{x:.1f}"


def _distance(row: dict) -> str:
    """The error (relative L2), or where no output is float the share of equal elements (an old
    results file's 0.0 for such a model stays as it was written)."""
    if row.get("error") is not None:
        return f"{row['error']:.3g}"
    return f"{row['agreement']:.0%} equal" if row.get("agreement") is not None else "no number"


def _cell(row: dict | None, peer: bool = False) -> str:
    """'time s (error / decisions kept)' of one command or peer."""
    if not row:
        return "-"
    if peer and not row.get("handles"):
        if "load_error" in row:
            return f"{_t(row.get('wall'))} s, does not run"
        if "finite" in row and row.get("finite"):
            return f"{_t(row.get('wall'))} s, not smaller ({_distance(row)})"
        return "fails" if row.get("rc") != 0 else "NaN"
    if row.get("rc") not in (0, None):
        return f"exit {row['rc']} ({_t(row.get('wall'))} s)"
    if "load_error" in row:
        return f"{_t(row.get('wall'))} s, does not run"
    if "finite" not in row:
        return f"{_t(row.get('wall'))} s"
    kept = row.get("decisions")
    return (f"{_t(row.get('wall'))} s{timing.cell(row.get('time'))} "
            f"({_distance(row)} / {'-' if kept is None else f'{kept:.0%}'})")


def markdown(results: dict) -> str:
    dated = len({m.get("date") for m in results["models"]}) > 1
    lines = [
        "## Zoo",
        "",
        "`make zoo` (`zoo/run.py`, issue 59): real models from PyPI wheels and npm tarballs that no other",
        "bench uses, with task inputs that mean something (zoo/inputs.py), each command of the CLI in a",
        "fresh process on the model as shipped and on variants built in code (external data, a folder,",
        "float16, bfloat16 storage, opset 21), beside onnxruntime's quantize_dynamic (int8), its",
        "MatMulNBitsQuantizer (int4, block 32, symmetric) and onnx-shrink-ray (int8 per channel).",
        "Each cell: seconds (relative L2 error, the largest over outputs and report-set samples / task",
        "decisions kept, zoo/decisions.py). Times include interpreter start; one run each, on a shared",
        "2-core machine; a time over its line against the fastest peer shows [first ratio -> median ratio]",
        "of three pairs, ours and that peer run again alternated (zoo/timing.py). Invariants: checks over all",
        "variants and commands (zoo/invariants.py).",
        f"Run: {results['date']}, {results['seconds'] / 60:.0f} min of model runs"
        f"{' (--quick)' if results['quick'] else ''}"
        f"{'; merged from runs on several dates (each model: its run, UTC)' if dated else ''}.",
        "",
        "| model | domain | MB | `quant` | quantize_dynamic | onnx-shrink-ray | `quant --inputs` "
        f"| `quant --dtype int4` | `quant --dtype int4 --inputs` | matmul_nbits int4 | invariants passed / failed |"
        f"{' run |' if dated else ''}",
        f"|---|---|---|---|---|---|---|---|---|---|---|{'---|' if dated else ''}",
    ]
    for r in results["models"]:
        cmds = r.get("variants", {}).get("shipped", {}).get("commands", {})
        peers = r.get("peers", {})
        n_checks = sum(len(v.get("commands", {})) for v in r.get("variants", {}).values())
        n_fail = len(r.get("failures", []))
        lines.append(
            f"| {r['name']} | {r['domain'].split(' (')[0]} | {r['size'] / 1e6:.1f} | {_cell(cmds.get('quant'))} | "
            f"{_cell(peers.get('quantize_dynamic'), True)} | {_cell(peers.get('shrink_ray'), True)} | "
            f"{_cell(cmds.get('quant --inputs'))} | {_cell(cmds.get('quant --dtype int4'))} | "
            f"{_cell(cmds.get('quant --dtype int4 --inputs'))} | "
            f"{_cell(peers.get('matmul_nbits'), True)} | {max(0, n_checks - n_fail)} / {n_fail} |"
            + (f" {r.get('date', '')[5:]} |" if dated else ""))
    lines += int8_against_peers(results)
    lines += ["", "Failed invariants (model [variant] command: message):", ""]
    lines += [f"- {f}" for f in results["failures"]] or ["- none"]
    lines += ["", "Skipped variants:", ""]
    for r in results["models"]:
        for v, row in r.get("variants", {}).items():
            if "skipped" in row:
                lines.append(f"- {r['name']} {v}: {row['skipped']}")
    lines += ["", "Models considered and left out:", ""] + [f"- {k}: {v}" for k, v in SKIPPED.items()]
    return "\n".join(lines) + "\n"


def _against(row: dict | None, model: dict) -> str:
    """'error, file MB, memory at load, latency' of one int8 result, the last two as multiples
    of the original's."""
    if not row or "finite" not in row or row.get("handles") is False:
        return "-"
    ratio = lambda key: f"{row[key] / model[key]:.2f}x" if row.get(key) and model.get(key) else "-"  # noqa: E731
    return f"{_distance(row)}, {row['size'] / 1e6:.2f} MB, {ratio('load_memory')}, {ratio('latency')}"


def int8_against_peers(results: dict) -> list[str]:
    """The default int8 beside the data-free int8 peers: which is more accurate is only half the
    question where one of them holds more memory than the float model once loaded (onnx-shrink-ray's
    Cast-Mul-Add chains fold back to float at load; ours keep weights integer where the float
    form would hold more than the original)."""
    rows = [r for r in results["models"] if r.get("load_memory")]
    if not rows:
        return []
    lines = ["", "The default int8 against the data-free int8 peers, on the models as shipped. Each cell: relative",
             "L2 on the report set, file size, the memory onnxruntime holds once the file is loaded (peak",
             "growth of a fresh process creating a default CPU session) and the latency of one inference",
             "(zoo/latency.py: one report sample, one thread, median), both as multiples of the original's.", "",
             "| model | original: at load, latency | `quant` | quantize_dynamic | onnx-shrink-ray |",
             "|---|---|---|---|---|"]
    for r in rows:
        cmds = r.get("variants", {}).get("shipped", {}).get("commands", {})
        peers = r.get("peers", {})
        took = f"{r['latency'] * 1e3:.1f} ms" if r.get("latency") else "-"
        lines.append(f"| {r['name']} | {r['load_memory'] / 1e6:.1f} MB, {took} | {_against(cmds.get('quant'), r)} | "
                     f"{_against(peers.get('quantize_dynamic'), r)} | {_against(peers.get('shrink_ray'), r)} |")
    return lines + shrink_ray_ahead(results)


def shrink_ray_ahead(results: dict) -> list[str]:
    """Issue 55's count: the models where onnx-shrink-ray's file (at most 1.2x ours) errs less than
    the default `quant` on the report set, and which of them it leads on the tune set too."""
    ahead, judged = [], 0
    for r in results["models"]:
        ours = r.get("variants", {}).get("shipped", {}).get("commands", {}).get("quant", {})
        ray = r.get("peers", {}).get("shrink_ray", {})
        if ours.get("error") is None or not ray.get("handles") or ray.get("error") is None:
            continue
        judged += 1
        if ray["size"] <= 1.2 * ours["size"] and ray["error"] < ours["error"]:
            both = (ours.get("tune_error") is not None and ray.get("tune_error") is not None
                    and ray["tune_error"] < ours["tune_error"])
            ahead.append(f"{r['name']} ({ray['error']:.3g} against {ours['error']:.3g}"
                         + (f"; tune set {ray['tune_error']:.3g} against {ours['tune_error']:.3g})"
                            if ours.get("tune_error") is not None and ray.get("tune_error") is not None else ")")
                         + (" on both sets" if both else ""))
    if not judged:
        return []
    return ["", f"onnx-shrink-ray's file (at most 1.2x ours) errs less than the default `quant` on the report set on "
            f"{len(ahead)} of {judged} models, on both sets on {sum(a.endswith('both sets') for a in ahead)}: "
            + ("; ".join(ahead) or "none") + "."]


def write_docs(text: str) -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    old = doc.read_text()
    start = old.find("\n## Zoo\n")
    if start >= 0:
        end = old.find("\n## ", start + 8)
        new = old[:start + 1] + text + (old[end:] if end >= 0 else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    doc.write_text(new)
