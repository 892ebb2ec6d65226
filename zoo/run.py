"""Run every onnxsurgery command on every zoo model and variant, through the CLI in a fresh
process each (`python -m onnxsurgery ...`, cwd at the repository root), beside the peers
(onnxruntime quantize_dynamic, MatMulNBitsQuantizer int4, onnx-shrink-ray), and check the
invariants of zoo/invariants.py. Writes build/zoo/results.json and the "Zoo" section of
docs/benchmarks.md; exits 1 with the list of failed invariants if any failed.

    python zoo/run.py [--only NAME ...] [--quick] [--no-docs] [--timeout S]
"""

from __future__ import annotations

import argparse
import compileall
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from zoo import (across_variants, draws, free_worth, int4_worth, invariants, memory_bounds, predicted,  # noqa: E402
                 same_plan, stored, variants)
from zoo.command_row import Stored, command_row  # noqa: E402
from zoo.commands import (FULL, HEAVY_CMDS, HEAVY_STORAGE, MEASURED_AGAINST, OTHER_CMDS, QUICK_CMDS,  # noqa: E402
                          QUICK_STORAGE, STORAGE_CMDS)
from zoo.fetch import fetch  # noqa: E402
from zoo.latency import latency  # noqa: E402
from zoo.models import MODELS, Model  # noqa: E402
from zoo.onnx_runs import evaluate, finite, load_memory, run_feeds  # noqa: E402
from zoo.own_run import own_growth  # noqa: E402
from zoo.processes import measured, ours  # noqa: E402
from zoo.tables import markdown, write_docs  # noqa: E402

BUILD = ROOT / "build" / "zoo"
WORK = BUILD / "work"


def run_peers(m: Model, src: Path, work: Path, ref, feeds, timeout: float) -> dict:
    from zoo.peers import PEERS

    res = {}
    for peer, kind in PEERS.items():
        out = work / f"peer.{peer}.onnx"
        out.unlink(missing_ok=True)
        r = measured([sys.executable, str(ROOT / "zoo" / "peers.py"), peer, str(src), str(out)], timeout)
        row = {"kind": kind, "rc": r.rc, "wall": round(r.wall, 2), "cpu": round(r.cpu, 2), "peak_anon": r.peak_anon,
               "killed": r.killed}
        if r.rc == 0 and out.exists():
            row["size"] = sum(p.stat().st_size for p in work.glob(f"peer.{peer}.onnx*"))
            row.update(evaluate(out, ref, feeds, m))
            # handles it: runs, finite, and made it smaller (a peer that changed nothing sets no pace)
            row["handles"] = ("load_error" not in row and row.get("finite", False)
                              and row["size"] < 0.9 * variants.stored_size(src))
            if row["handles"] and kind == "int8":
                row["load_memory"] = load_memory(out)
                row["latency"] = latency(out, feeds[0])
        else:
            row["handles"] = False
            row["error_line"] = invariants._last(r.stderr)
        res[peer] = row
        said = invariants.said(row) or row.get("load_error", row.get("error_line", ""))
        print(f"    peer {peer:17s} rc={r.rc} {r.wall:6.1f} s  {said[:80]}", flush=True)
    return res


def tiny_baseline() -> int:
    """The interpreter's baseline as tests/test_memory_bounds.py takes it: `run` and `quant` of a
    tiny model in a fresh process."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    d = WORK / "_baseline"
    d.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(d / "t.onnx"))
    a = measured(ours("run", d / "t.onnx"), 120).peak_anon
    b = measured(ours("quant", d / "t.onnx", d / "q.onnx", "--min-elements", "16"), 120).peak_anon
    return max(a, b)


def run_model(m: Model, args, baseline: int, base: dict) -> dict:
    """Fills `base` as it goes (a zoo error midway keeps what was measured)."""
    t0 = time.perf_counter()
    src = fetch(m)
    work = WORK / m.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    from zoo import inputs  # Pillow, espeak-ng: only where inputs are built (make test has neither)

    tune_feeds = inputs.build(m, src, "tune")
    report_feeds = inputs.build(m, src, "report")
    tune = inputs.save_npz(tune_feeds, work / "tune.npz")
    report = inputs.save_npz(report_feeds, work / "report.npz")
    ref = run_feeds(src, report_feeds)
    base.update({"name": m.name, "source": m.source, "package": m.package, "path": m.path, "domain": m.domain,
                 "size": variants.stored_size(src), "note": m.note, "inputs": m.inputs, "decision": m.decision,
                 "n_tune": len(tune_feeds), "n_report": len(report_feeds), "variants": {}, "failures": []})
    print(f"== {m.name}: {variants.stored_size(src) / 1e6:.1f} MB, {m.domain}", flush=True)
    # --no-peers (CI): every invariant but time, which is a benchmark's on a quiet machine
    base["peers"] = {} if args.no_peers else run_peers(m, src, work, ref, report_feeds, args.timeout)
    if not args.no_peers:  # beside the peers' figures: what the original holds at load, and costs a run
        base["load_memory"] = load_memory(src)
        base["latency"] = latency(src, report_feeds[0])
    peer_time = {"int8": {k: v["wall"] for k, v in base["peers"].items() if v["kind"] == "int8" and v["handles"]},
                 "int4": {k: v["wall"] for k, v in base["peers"].items() if v["kind"] == "int4" and v["handles"]}}
    # --quick: bfloat16 storage too, `quant` only (its Casts hid rxnmap's tables from the input generator)
    chosen = (["shipped", "external", "linked"] + ["bf16"] * (not m.heavy) if args.quick
              else ["shipped", "external", "folder", "linked"] if m.heavy else
              ["shipped", "external", "folder", "linked", "fp16", "bf16", "opset21"])
    chosen = [v for v in chosen if not args.variants or v in args.variants]
    plans: dict[str, dict[str, str]] = {"quant --dry-run --json": {}, "quant --dry-run --json --inputs": {}}
    vdir = WORK / m.name / "variants"
    for variant in chosen:
        try:
            vpath = variants.build(variant, src, vdir)
        except variants.Skip as s:
            base["variants"][variant] = {"skipped": str(s)}
            print(f"  {variant}: skipped: {s}", flush=True)
            continue
        if args.quick:
            cmds = QUICK_CMDS if variant == "shipped" else QUICK_STORAGE if variant in variants.STORAGE else ["quant"]
        elif m.heavy:
            cmds = HEAVY_CMDS if variant == "shipped" else HEAVY_STORAGE
        else:
            cmds = FULL if variant == "shipped" else STORAGE_CMDS if variant in variants.STORAGE else OTHER_CMDS
        largest, half = memory_bounds.largest_tensor_bytes(vpath)
        # what onnxruntime holds to run the model itself once (its activations), over the baseline
        alone = [sys.executable, str(HERE / "own_run.py"), str(vpath), str(report)]
        own = own_growth(measured(alone, args.timeout), baseline)
        lists = memory_bounds.list_bytes(vpath)
        bound = memory_bounds.memory_bound(baseline, largest, half, lists)
        # the original of this variant, on the report set (fp16/bf16/opset21 compute differently)
        vref = ref if variant in variants.STORAGE else run_feeds(vpath, report_feeds)
        if not finite(vref) and finite(ref):  # oww_melspectrogram's fp16: int16-scale audio squared overflows
            base["variants"][variant] = {"skipped": "its original computes no number on the report set (16-bit "
                                                    "floats overflow where the model as shipped is finite)"}
            print(f"  {variant}: skipped: {base['variants'][variant]['skipped']}", flush=True)
            continue
        # exactness is judged against the same graph in topological order where the file is not
        # (an fp16 converter appends its Casts last): onnxruntime's optimizer computes such a
        # graph differently once sorted, and any valid output is sorted (docs/limits.md)
        sorted_copy = variants.topologically_sorted(vpath, work / f"{variant}.sorted")
        exact_ref = run_feeds(sorted_copy, report_feeds) if sorted_copy is not None else vref
        rows = {}
        base["variants"][variant] = {"path": str(vpath.relative_to(ROOT)), "commands": rows}
        stored_variant = Stored(m, variant, vpath, src, work, tune, report, tune_feeds, report_feeds, vref,
                                exact_ref, bound, own, lists, peer_time, base, args)
        for cmd in cmds:
            row, r = command_row(stored_variant, cmd)
            if "dry-run" in cmd and r.rc == 0:
                plans[cmd][variant] = r.stdout
            if cmd == "info" and r.rc == 0:
                info_json = r.stdout
            rows[cmd] = row
            fails = row["failures"]
            for f in fails:
                base["failures"].append(f"{m.name} [{variant}] {cmd}: {f}")
            extra = f" {invariants.said(row)} kept {row['decisions']}" if "finite" in row else ""
            print(f"  {variant:8s} {cmd:34s} rc={r.rc} {r.wall:6.1f} s {r.peak_anon / 1e6:6.0f} MB{extra}"
                  + (f"  FAIL: {'; '.join(fails)}" if fails else ""), flush=True)
        if variant == "shipped" and "info" in rows and rows["info"]["rc"] == 0:  # invariant 13
            fails = predicted.within_prediction(info_json, rows)
            rows["info"]["failures"] += fails
            base["failures"] += [f"{m.name} [{variant}] info: {f}" for f in fails]
            for f in fails:
                print(f"  {variant:8s} info: FAIL: {f}", flush=True)
        for on_inputs, data_free in MEASURED_AGAINST.items():  # invariant 5
            a, b = rows.get(on_inputs, {}), rows.get(data_free, {})
            if a.get("error") is not None and b.get("error") is not None:
                fails = invariants.measured_holds(a["error"], b["error"])
                a["failures"] = a.get("failures", []) + fails
                base["failures"] += [f"{m.name} [{variant}] {on_inputs}: {f}" for f in fails]
                for f in fails:
                    print(f"  {variant:8s} {on_inputs}: FAIL: {f}", flush=True)
        pairs = (("quant --dtype int4", int4_worth.int4_pays, "quant", "quant --dtype int4"),  # invariant 18
                 ("quant", free_worth.free_holds, "quant", "quant --inputs"))  # invariant 19
        for judged, judge, first, second in pairs:  # the first named row takes the failures
            fails = judge(rows.get(first, {}), rows.get(second, {}))
            if fails:
                rows[judged]["failures"] += fails
                base["failures"] += [f"{m.name} [{variant}] {judged}: {f}" for f in fails]
                for f in fails:
                    print(f"  {variant:8s} {judged}: FAIL: {f}", flush=True)

    def half_draws(variant: str) -> list:  # invariant 12's draws of the shipped weights (zoo/draws.py)
        return draws.draw_errors(src, work / "draws", variant, invariants.HALF_DRAWS,
                                 lambda p, out: measured(ours("quant", p, out), args.timeout).rc,
                                 lambda p, out: evaluate(out, run_feeds(p, report_feeds), report_feeds, m))

    def half_shipped_plan(variant: str) -> dict:  # invariant 12's last look (zoo/same_plan.py)
        vpath = ROOT / base["variants"][variant]["path"]
        return same_plan.applied(vpath, plans["quant --dry-run --json"].get("shipped"), work / variant,
                                 lambda *a: measured(ours("quant", vpath, *a), args.timeout),
                                 lambda out: evaluate(out, run_feeds(vpath, report_feeds), report_feeds, m))

    for where, f in across_variants.judged(base["variants"], plans, half_draws,
                                           half_shipped_plan):  # invariants 11, 12 and 3
        base["failures"].append(f"{m.name} {where}: {f}")
        print(f"  {where}: FAIL: {f}", flush=True)
    base["seconds"] = round(time.perf_counter() - t0, 1)
    if not args.keep:
        for p in work.glob("*"):
            if p.name not in ("tune.npz", "report.npz"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    return base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="model names (zoo/models.py)")
    ap.add_argument("--quick", action="store_true", help="the quick models, shipped + external, fewer commands")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per command (default 300, --quick 120)")
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the written files under build/zoo/work")
    ap.add_argument("--no-peers", action="store_true",
                    help="run no peer, so check no time (CI: time is a benchmark's, on a quiet machine)")
    ap.add_argument("--variants", nargs="*", default=None,
                    help="only these of the variants the mode runs (zoo/variants.py), e.g. fp16")
    ap.add_argument("--out", default=str(BUILD / "results.json"))
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="only merge results files into --out and the docs")
    args = ap.parse_args(argv)
    # each command is timed in a fresh interpreter, as a user's installed copy runs: with its
    # bytecode compiled (pip compiles it at install; an editable checkout under
    # PYTHONDONTWRITEBYTECODE=1 recompiles ~160 modules at every start, 0.1 s of a 0.5 s command)
    compileall.compile_dir(str(ROOT / "onnxsurgery"), quiet=1)
    if args.merge:
        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        for part in parts:  # each model keeps its own run's date; a later part's model replaces an earlier one's
            for m in part["models"]:
                m.setdefault("date", part["date"])
        latest = {m["name"]: m for p in parts for m in p["models"]}
        parts = [{**p, "models": [m for m in p["models"] if latest[m["name"]] is m]} for p in parts]
        results = {"date": max(p["date"] for p in parts), "quick": any(p["quick"] for p in parts),
                   "baseline": parts[0]["baseline"],
                   "seconds": sum(m.get("seconds", 0) for p in parts for m in p["models"]),
                   "models": [m for p in parts for m in p["models"]],
                   "failures": [f for p in parts for f in p["failures"]]}
        for m in results["models"]:
            stored.retime(m)
        results["failures"] = [f for m in results["models"] for f in m["failures"]]
        order = {m.name: i for i, m in enumerate(MODELS)}
        results["models"].sort(key=lambda m: order.get(m["name"], 99))
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))
        if not args.no_docs:
            write_docs(markdown(results))
        return 1 if results["failures"] else 0
    args.timeout = args.timeout or (120 if args.quick else 300)
    chosen = [m for m in MODELS if (not args.only or m.name in args.only) and (args.only or not args.quick or m.quick)]
    if args.only and len(chosen) != len(args.only):
        ap.error(f"unknown model(s): {sorted(set(args.only) - {m.name for m in MODELS})}")
    args.previous = stored.previous_runs(Path(args.out))  # invariant 6, before this run overwrites it
    t0 = time.perf_counter()
    baseline = tiny_baseline()
    print(f"baseline (run/quant of a tiny model): {baseline / 1e6:.0f} MB", flush=True)
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": args.quick,
               "baseline": baseline, "models": [], "failures": []}
    for m in chosen:
        r = {"name": m.name, "domain": m.domain, "size": 0, "variants": {}, "failures": []}
        try:
            run_model(m, args, baseline, r)
        except Exception as e:  # noqa: BLE001 - the zoo's own failure on one model: recorded, go on
            import traceback

            traceback.print_exc()
            r.setdefault("failures", []).append(f"{m.name}: zoo error: {type(e).__name__}: {e}")
        results["models"].append(r)
        results["failures"] += r["failures"]
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    results["seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).write_text(json.dumps(results, indent=1, default=str))
    if not args.no_docs:
        write_docs(markdown(results))
    print(f"\n{len(results['failures'])} failed invariants in {results['seconds'] / 60:.1f} min; {args.out}")
    for f in results["failures"]:
        print(f"  {f}")
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
