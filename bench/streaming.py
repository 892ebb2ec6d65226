"""Issue 48's figures: what each command costs on a Llama-shaped decoder built in code, in wall
time and peak anonymous memory (RssAnon of the command and its children, bench/memory.py),
against the bound `1 GB + 4 x largest tensor` and against `cp` of the same data file.

    python bench/streaming.py                      # the 1.4B fp32 decoder (5.46 GB)
    python bench/streaming.py --size tiny          # a quick look that the harness works
    python bench/streaming.py --larger-than-memory # also the 6.7B (27 GB), if the disk has room

Steps, each command in a fresh process (`python -m onnxsurgery`, from PYTHONPATH if set, else
this checkout): build the decoder (samples/make_decoder.py); `cp` its data file (throughput);
info; run; shrink; compare (original against shrink's output); shrink --verify; quant (default,
verified); quant --no-verify; quant --dtype int4; quant --dtype int4 --target onnxruntime; quant
--dry-run; report (--methods int8); onnxruntime's matmul_nbits_quantizer (int4, block 32, the
model loaded whole as it does; needs onnx-ir); npy (every constant of 1 MB or more) and then
embed of npy's result, the original deleted first, so that at most about 3 model sizes are on
disk at once. Every output is deleted once measured.

`--larger-than-memory` then builds the 6.7B model (32 layers, hidden 4096: 27 GB fp32) if the
disk has 2.2x that free (shutil.disk_usage), quantizes it int8 and int4, verified, runs a
token of each result, and deletes everything it wrote. Commands there are stopped if their
RssAnon passes `--kill-above` (default 16 GB).

Results: build/streaming/streaming-SIZE.json and .md (the table), with the onnxsurgery commit
measured (and whether its tree had uncommitted changes).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from memory import Measurement, measure  # noqa: E402

GB = 1e9
RATIOS = ("quant --no-verify", "quant --dtype int4 --no-verify", "shrink", "npy --min-bytes 1048576",
          "embed (npy's output)", "onnxruntime matmul_nbits_quantizer (int4)")


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(ROOT))
    return env


def _source(env: dict, cwd: Path) -> dict:
    """Which onnxsurgery the commands run: its folder, git commit and whether it was dirty."""
    code = "import onnxsurgery, os; print(os.path.dirname(onnxsurgery.__file__))"
    where = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                           check=True).stdout.strip()
    repo = str(Path(where).parent)

    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    return {"package": where, "commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", "onnxsurgery"))}


def _largest_tensor(model: Path) -> int:
    """Bytes of the model's largest initializer (read without the weights)."""
    proto = onnx.load(str(model), load_external_data=False)
    largest = 0
    for t in proto.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        largest = max(largest, n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize)
    return largest


def _model_bytes(model: Path) -> int:
    return sum(p.stat().st_size for p in model.parent.iterdir() if p.is_file() and p.name.startswith(model.name))


def _rm(*paths: Path) -> None:
    for p in paths:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            for q in p.parent.glob(p.name + "*"):  # the .onnx and its .data / .npy.json
                if q.is_dir():
                    shutil.rmtree(q, ignore_errors=True)
                else:
                    q.unlink(missing_ok=True)


class Bench:
    def __init__(self, args, model: Path, out: Path, env: dict):
        self.args, self.model, self.out, self.env = args, model, out, env
        self.rows: list[dict] = []
        self.size = _model_bytes(model)
        self.largest = _largest_tensor(model)
        self.bound = 1 * GB + 4 * self.largest

    def measure(self, label: str, cmd: list, *, throughput: bool = False, cli: bool = True,
                note: str = "", output: Path | None = None) -> Measurement:
        """Run and record one command; `output`: the file it writes (with its .data or .npy
        companions, counted as its size), deleted by the caller."""
        full = [sys.executable, "-m", "onnxsurgery", *map(str, cmd)] if cli else list(map(str, cmd))
        load = os.getloadavg()[0]  # a shared machine: wall times stretch with the load, CPU times less
        # cwd: the output folder, so that `-m` finds onnxsurgery on PYTHONPATH, not in a checkout at cwd
        m = measure(full, env=self.env, cwd=str(self.out), timeout=self.args.timeout,
                    kill_above=int(self.args.kill_above * GB))
        row = {"label": label, "cmd": " ".join(map(str, cmd)), "ok": m.ok, "wall": round(m.wall, 2),
               "cpu": round(m.cpu, 2), "peak_anon": m.peak_anon, "peak_rss": m.peak_rss, "maxrss": m.maxrss,
               "peak_anon_at": round(m.peak_anon_at, 2), "processes": m.processes,
               "peak_per_model": round(m.peak_anon / self.size, 3),
               "peak_per_bound": round(m.peak_anon / self.bound, 3),
               "within_bound": m.peak_anon <= self.bound, "load_before": round(load, 2),
               "load_after": round(os.getloadavg()[0], 2), "note": note}
        if output is not None and output.parent.exists():
            stem = output.name.split(".")[0]
            row["output_bytes"] = sum(q.stat().st_size for q in output.parent.rglob(stem + "*") if q.is_file())
        if throughput:
            row["mb_per_s"] = round(self.size / 1e6 / m.wall, 1)
        if not m.ok:
            row["error"] = m.killed or m.stderr_tail.splitlines()[-1:] and m.stderr_tail.splitlines()[-1]
        self.rows.append(row)
        status = "ok" if m.ok else f"FAILED ({row.get('error')})"
        print(f"  {label:<44} {m.wall:7.1f} s  RssAnon {m.peak_anon / GB:6.2f} GB  "
              f"({m.peak_anon / self.size:.2f}x model, {m.peak_anon / self.bound:.2f}x bound)  {status}", flush=True)
        return m

    def cp(self) -> None:
        data = next(p for p in self.model.parent.iterdir() if p.name.endswith(".data"))
        target = self.out / "cp.data"
        os.sync()  # the build's dirty pages written first, so that cp is not charged for them
        self.measure("cp (data file)", ["cp", data, target], cli=False, throughput=True)
        _rm(target)

    def ratio(self, label: str) -> float | None:
        cp = next((r for r in self.rows if r["label"].startswith("cp")), None)
        row = next((r for r in self.rows if r["label"] == label), None)
        if cp and row and row.get("mb_per_s") and row["ok"]:
            return round(row["mb_per_s"] / cp["mb_per_s"], 3)
        return None


def run_commands(b: Bench, *, keep_model: bool) -> None:
    m, o = b.model, b.out

    def writes(label: str, args: list, name: str, then=None) -> None:
        """`onnxsurgery ARGS MODEL OUT/name`, its output measured (and `then(out)`), then deleted."""
        b.measure(label, [*args, m, o / name], throughput=True, output=o / name)
        if then and (o / name).exists():
            then(o / name)
        _rm(o / name)

    b.cp()
    b.measure("info", ["info", m])
    b.measure("run", ["run", m])
    writes("shrink", ["shrink"], "shrink.onnx",
           then=lambda out: b.measure("compare (original, shrink's output)", ["compare", m, out]))
    writes("shrink --verify", ["shrink", "--verify"], "shrink.onnx")
    writes("quant (int8, verified)", ["quant"], "q8.onnx",
           then=lambda out: b.measure("run (quant int8 output)", ["run", out]))
    writes("quant --no-verify", ["quant", "--no-verify"], "q8.onnx")
    writes("quant --dtype int4 --no-verify", ["quant", "--dtype", "int4", "--no-verify"], "q4.onnx")
    writes("quant --dtype int4 (verified)", ["quant", "--dtype", "int4"], "q4.onnx")
    writes("quant --dtype int4 --target onnxruntime", ["quant", "--dtype", "int4", "--target", "onnxruntime"],
           "q4ort.onnx")
    b.measure("quant --dry-run", ["quant", "--dry-run", m])
    if b.args.report:
        b.measure("report --methods int8", ["report", "--methods", "int8", "-o", o / "report.html", m])
        _rm(o / "report.html")
    try:
        import onnx_ir  # noqa: F401 - matmul_nbits_quantizer imports it

        (o / "ort_q4").mkdir(exist_ok=True)
        b.measure("onnxruntime matmul_nbits_quantizer (int4)",
                  [sys.executable, "-m", "onnxruntime.quantization.matmul_nbits_quantizer", "--input_model", m,
                   "--output_model", o / "ort_q4" / "model.onnx", "--block_size", "32", "--bits", "4"],
                  cli=False, throughput=True, output=o / "ort_q4" / "model.onnx",
                  note="loads the whole model (onnx.load)")
    except ImportError:
        print("  onnxruntime matmul_nbits_quantizer: skipped (pip install onnx-ir)")
    _rm(o / "ort_q4")
    b.measure("npy --min-bytes 1048576", ["npy", "--min-bytes", "1048576", m, o / "npy.onnx"], throughput=True,
              output=o / "npy.onnx")
    b.measure("run (npy's output)", ["run", o / "npy.onnx"])
    if not keep_model:  # at most ~3 model sizes on disk: the original goes before embed writes
        _rm(m.parent)
    b.measure("embed (npy's output)", ["embed", o / "npy.onnx", o / "embedded.onnx"], throughput=True,
              output=o / "embedded.onnx")
    for p in list(o.iterdir()):
        _rm(p)


def run_large(b: Bench) -> None:
    m, o = b.model, b.out
    b.cp()
    b.measure("info", ["info", m])
    for label, extra, name in (("quant int8 (verified)", [], "q8.onnx"),
                               ("quant --dtype int4 (verified)", ["--dtype", "int4"], "q4.onnx")):
        b.measure(label, ["quant", *extra, m, o / name], throughput=True, output=o / name)
        if (o / name).exists():
            b.measure(f"run ({label} output)", ["run", o / name])
            # a user's default session (prepacked, fused): does the result load where the original could not?
            b.measure(f"default onnxruntime session, one step ({label} output)",
                      [sys.executable, ROOT / "bench" / "default_session.py", o / name], cli=False)
        _rm(o / name)


def build(args, size: str, folder: Path, env: dict) -> tuple[Path, dict]:
    _rm(folder)
    cmd = [sys.executable, str(ROOT / "samples" / "make_decoder.py"), "--size", size, "--dtype", args.dtype,
           "--out", folder, "--quiet"]
    m = measure(cmd, env=env, cwd=str(folder.parent))
    if not m.ok:
        raise SystemExit(f"building the {size} decoder failed: {m.stderr_tail}")
    model = folder / "model.onnx"
    info = {"size": size, "dtype": args.dtype, "bytes": _model_bytes(model), "wall": round(m.wall, 2),
            "peak_anon": m.peak_anon, "mb_per_s": round(_model_bytes(model) / 1e6 / m.wall, 1)}
    print(f"built {model}: {info['bytes'] / GB:.2f} GB in {m.wall:.1f} s ({info['mb_per_s']:.0f} MB/s), "
          f"RssAnon {m.peak_anon / 1e6:.0f} MB", flush=True)
    return model, info


def _size(n: float) -> str:
    return f"{n / GB:.2f} GB" if n >= 0.1 * GB else f"{n / 1e6:.1f} MB"


def _model_size(size: str, dtype: str) -> int:
    """Bytes of make_decoder's `size` preset in `dtype`, from its parameter count."""
    spec = importlib.util.spec_from_file_location("make_decoder", ROOT / "samples" / "make_decoder.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_decoder", module)
    spec.loader.exec_module(module)
    return module.config_from(size, dtype=dtype).parameters * module.ITEMSIZE[dtype]


def markdown(result: dict) -> str:
    lines = [f"# Streaming figures: {result['model']['size']} decoder, {result['model']['dtype']}", "",
             f"- measured {result['date']} on {result['host']}; onnxsurgery {result['source']['commit'][:12]}"
             f"{' (uncommitted changes)' if result['source']['dirty'] else ''} ({result['source']['package']})",
             f"- model: {result['model']['bytes'] / GB:.2f} GB, largest tensor {result['largest'] / 1e6:.0f} MB, "
             f"bound 1 GB + 4 x largest = {result['bound'] / GB:.2f} GB; built in {result['model']['wall']:.1f} s "
             f"({result['model']['mb_per_s']:.0f} MB/s)",
             "- peak: summed RssAnon of the command and its children, sampled every 20 ms; CPU: user + system;"
             " load: the 1-minute load average as the command started (2 cores shared: wall times stretch with it)",
             "",
             "| command | wall | CPU | peak RssAnon | peak / model | peak / bound | MB/s | vs cp | output | peak VmRSS"
             " | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    cp = next((r for r in result["rows"] if r["label"].startswith("cp")), None)
    for r in result["rows"]:
        ratio = f"{r['mb_per_s'] / cp['mb_per_s']:.2f}x" if cp and r.get("mb_per_s") and r["ok"] else ""
        status = "" if r["ok"] else f" **failed: {r.get('error', '')}**"
        load = f"{r['load_before']:.1f}" if "load_before" in r else ""
        output = _size(r["output_bytes"]) if "output_bytes" in r else ""
        lines.append(f"| `{r['label']}`{status} | {r['wall']:.1f} s | {r['cpu']:.1f} s | "
                     f"{r['peak_anon'] / GB:.2f} GB | "
                     f"{r['peak_per_model']:.2f}x | {r['peak_per_bound']:.2f}x{'' if r['within_bound'] else ' (over)'}"
                     " | "
                     f"{r.get('mb_per_s', '')} | {ratio} | {output} | {r['peak_rss'] / GB:.2f} GB | {load} |")
    if result.get("ratios"):
        lines.append("")
        lines.extend(f"- {key}: {value:.2f}x" for key, value in result["ratios"].items())
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1.4b", help="make_decoder preset (default 1.4b)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "streaming")
    ap.add_argument("--report", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure `report --methods int8` (default on)")
    ap.add_argument("--keep-model", action="store_true", help="keep the built model (the default deletes it)")
    ap.add_argument("--larger-than-memory", action="store_true",
                    help="then the 6.7B model, if the disk has 2.2x its size free")
    ap.add_argument("--large-size", default="6.7b", help="the larger-than-memory preset (default 6.7b)")
    ap.add_argument("--skip-small", action="store_true", help="only the --larger-than-memory run")
    ap.add_argument("--kill-above", type=float, default=16.0,
                    help="GB of RssAnon that stops a command (default 16, on a 24 GB machine)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per command (default 1800)")
    args = ap.parse_args()
    env = _env()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    source = _source(env, args.out)
    print(f"onnxsurgery {source['commit'][:12]}{' (dirty)' if source['dirty'] else ''} from {source['package']}")

    runs = [] if args.skip_small else [(args.size, False)]
    if args.larger_than_memory:
        runs.append((args.large_size, True))
    for size, large in runs:
        folder, work = args.out / f"model-{size}", args.out / f"work-{size}"
        if large:
            need = 2.2 * _model_size(size, args.dtype)
            free = shutil.disk_usage(args.out).free
            if free < need:
                print(f"skipped the {size} model: {free / GB:.0f} GB free on disk, {need / GB:.0f} GB needed")
                continue
        model, info = build(args, size, folder, env)
        _rm(work)
        work.mkdir(parents=True)
        b = Bench(args, model, work, env)
        started = datetime.datetime.now(datetime.timezone.utc)
        try:
            run_large(b) if large else run_commands(b, keep_model=args.keep_model)
        finally:
            if not args.keep_model or large:
                _rm(folder)
            _rm(work)
        after = _source(env, args.out)
        result = {"date": started.isoformat(timespec="seconds"), "host": os.uname().nodename,
                  "cpus": os.cpu_count(), "source": source, "source_after": after,
                  "model": info, "largest": b.largest, "bound": b.bound, "rows": b.rows,
                  "ratios": {f"{label} / cp throughput": b.ratio(label) for label in RATIOS
                             if b.ratio(label) is not None}}
        if after["commit"] != source["commit"]:
            print(f"warning: onnxsurgery moved from {source['commit'][:12]} to {after['commit'][:12]} during the run")
        stem = args.out / f"streaming-{size}-{args.dtype}"
        stem.with_name(stem.name + ".json").write_text(json.dumps(result, indent=1) + "\n")
        stem.with_name(stem.name + ".md").write_text(markdown(result))
        print(markdown(result))
        print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
