"""One onnxsurgery command on one stored variant of a zoo model: run it in a fresh process, judge
the invariants that concern that command's own output, and give its row of the results (zoo/run.py
loops over the variants and their commands, and judges what spans several rows)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zoo import advice, carried, default_load, invariants, kernels_named, memory_bounds, timing, variants
from zoo.commands import COMMANDS, PEER_KIND, argv_for, out_path
from zoo.latency import alternated, latency
from zoo.models import Model
from zoo.onnx_runs import evaluate, load_memory, ranked, run_feeds
from zoo.processes import measured, ours


@dataclass
class Stored:
    """A stored variant of a model (shipped, external, fp16...) and what its commands are judged
    against: the original's runs, the memory bound, the peers' times."""

    m: Model
    variant: str
    path: Path                # the variant's file (or folder)
    src: Path                 # the model as shipped
    work: Path
    tune: Path                # the samples as .npz, as `--inputs` takes them
    report: Path
    tune_feeds: list
    report_feeds: list
    vref: list                # this variant's original on the report set
    exact_ref: list           # the same, from the graph in topological order (shrink's exactness)
    bound: int
    own: int
    lists: int
    peer_time: dict           # {"int8": {peer: wall}, "int4": {...}}: the peers that handle it
    model_row: dict           # the model's results so far: its peers, its latency
    args: object
    tune_refs: dict = field(default_factory=dict)  # the original on the tune set, run once if asked

    def tune_ref(self, path: Path) -> list:
        if path not in self.tune_refs:
            self.tune_refs[path] = run_feeds(path, self.tune_feeds)
        return self.tune_refs[path]


def command_row(v: Stored, cmd: str):
    """Runs `cmd` on `v`; returns (its row with "failures", the measured process)."""
    out = out_path(v.work, v.variant, cmd)
    npy_out = v.work / f"{v.variant}.npy_model.onnx"
    r = measured(ours(*argv_for(cmd, v.path, out, npy_out, v.tune, v.report)), v.args.timeout)
    word, judge, kind = COMMANDS[cmd]
    last = invariants._last(r.stderr)
    fails = invariants.clean_exit(word, r.rc, r.stdout, r.stderr, r.killed)
    fails += invariants.newly_refused(getattr(v.args, "previous", {}).get((v.m.name, v.variant, cmd)), r.rc, last)
    # the peers quantized the shipped weights: a storage variant of them is the same task
    handling = (sorted(v.peer_time.get(PEER_KIND.get(kind), {}))
                if v.variant in variants.STORAGE and "dry-run" not in cmd else [])
    fails += invariants.refused_runnable(cmd, r.rc, last, handling)
    fails += advice.check_holds(v.path) if cmd == "check" and r.rc in (0, 1) else []  # invariant 16
    row = {"rc": r.rc, "wall": round(r.wall, 2), "cpu": round(r.cpu, 2), "peak_anon": r.peak_anon,
           "bound": v.bound, "stderr_last": last if r.rc else ""}
    if cmd != "report":  # docs/memory.md: report measures default sessions, by design unbounded
        fails += memory_bounds.within_memory(r.peak_anon, memory_bounds.command_bound(v.bound, cmd, v.own, v.lists))
    if r.rc == 0 and judge is not None and out.exists() and "dry-run" not in cmd:
        fails += _written(v, cmd, out, judge, r.stdout, row)
    if v.variant == "shipped" and kind and r.rc == 0:  # over its line: timed again, alternated
        retime = argv_for(cmd, v.path, v.work / "retime.onnx", v.work / "retime.npy.onnx", v.tune, v.report)
        tfails, row["time"] = timing.judged(kind, r.wall, v.peer_time, retime, v.src, v.work, v.args.timeout)
        fails += tfails
    row["failures"] = fails
    return row, r


def _written(v: Stored, cmd: str, out: Path, judge, stdout: str, row: dict) -> list[str]:
    """The invariants of a written file: it runs, computes what the original did (exactly, or
    within what the report says), loads in a user's default session; fills `row`."""
    ev = evaluate(out, v.exact_ref if judge == "exact" else v.vref, v.report_feeds, v.m)
    if judge == "exact" and v.exact_ref is not v.vref and ev.get("identical") is False:
        # nothing to change: a copy of the input, in the file's own order, is exact too
        as_shipped = evaluate(out, v.vref, v.report_feeds, v.m)
        ev = as_shipped if as_shipped.get("identical") else ev
    row.update(ev)
    row["size"] = (sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.is_dir()
                   else sum(p.stat().st_size for p in out.parent.glob(out.name + "*")))
    fails = invariants.written_model(ev, exact=judge == "exact", min_agreement=1.0 if judge == "exact" else judge)
    if cmd.startswith("quant"):
        fails += invariants.verified_something(stdout, ev.get("error"))
    if "load_error" in ev:
        return fails
    fails += default_load.written_loads(cmd, out, v.path)  # invariant 15: a plain session, in a child
    fails += kernels_named.judged(cmd, stdout, out) if v.variant == "shipped" else []  # invariant 17
    if v.variant == "shipped" and cmd in ("quant", "quant --dtype int4") and carried.applies(v.report_feeds):
        fails += invariants.own_decoding(carried.decode(v.src, v.report_feeds),  # invariant 14
                                         carried.decode(out, v.report_feeds), judge)
    if cmd.startswith("quant") and cmd.endswith("--inputs"):
        fails += _reported_honestly(v, out, stdout)
    if v.variant == "shipped" and cmd == "quant" and not v.args.no_peers:
        fails += _beside_shrink_ray(v, out, row)
    return fails


def _reported_honestly(v: Stored, out: Path, report_json: str) -> list[str]:
    """Invariant 8: the written file's error on the --inputs the command measured on, against
    the error its --json report gives."""
    refs = v.tune_ref(v.path)
    try:
        new = run_feeds(out, v.tune_feeds)
    except Exception as e:  # noqa: BLE001 - invariant 2 reports a file that does not run
        return [f"written model does not run on the tune set: {str(e).splitlines()[0][:200]}"]
    return invariants.reported_honestly(invariants.per_output_errors(refs, new, ranked(v.path)), report_json)


def _beside_shrink_ray(v: Stored, out: Path, row: dict) -> list[str]:
    """The default `quant` of the shipped model: its tune-set error beside onnx-shrink-ray's (issue
    55: a gap that reverses between the two sets is the samples' luck, not a rule's), what it holds
    at load, and its latency against the original's (invariant 10)."""
    tune_ref = v.tune_ref(v.src)
    row["tune_error"] = evaluate(out, tune_ref, v.tune_feeds, v.m).get("error")
    ray = v.model_row["peers"].get("shrink_ray", {})
    if ray.get("handles"):
        ray["tune_error"] = evaluate(v.work / "peer.shrink_ray.onnx", tune_ref, v.tune_feeds, v.m).get("error")
    row["load_memory"] = load_memory(out)
    row["latency"] = latency(out, v.report_feeds[0])
    slow = invariants.within_latency(row["latency"], v.model_row["latency"])
    if slow:  # timed minutes apart: confirmed only alternating with the original
        before, after = alternated(v.src, out, v.report_feeds[0])
        row["latency_alternated"] = [before, after]
        row["latency"] = v.model_row["latency"] * after / before  # the table's ratio is this one
        slow = invariants.within_latency(after, before)
    return slow
