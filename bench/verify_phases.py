"""Where a verified `quant` spends its time, phase by phase (issue 58: verified at most 1.15x
`--no-verify`): the command runs in this process, and every verification session and run
(running/runs.py's seam, both sides'), the write (`write_checked`) and the comparison
(`compare_models`) are timed: wall from the start, the calling thread's CPU, the thread's name
(the reference's runs start on a thread of their own, running/ahead.py). The process's user and
system CPU and its minor page faults close the list. With `--ort-profile DIR`, every session
also writes onnxruntime's own profile there, summed here per session: model loading, session
initialization, the run, and the operators that took most of it (kernel time, wall: under load
it counts waits for a core too).

    python bench/verify_phases.py [--ort-profile DIR] -- quant m.onnx q.onnx --dtype int4

Run it twice, with and without `--no-verify`, and compare the process's CPU: what verification
adds. Measured, not decided: nothing here changes what `quant` computes or writes.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

START = time.perf_counter()
LOG: list[tuple] = []


def timed(label, fn):
    """`fn`, each call logged in LOG: thread, label, start and end (wall from START), thread CPU."""
    def wrapped(*args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            LOG.append((threading.current_thread().name, label(args, kwargs) if callable(label) else label,
                        wall - START, time.perf_counter() - START, time.thread_time() - cpu))
    return wrapped


def _feeds(args, kwargs) -> str:
    feeds = args[2] if len(args) > 2 else kwargs.get("feeds", {})
    return f"run: {len(feeds)} feeds, {sum(getattr(v, 'nbytes', 0) for v in feeds.values()) / 2**20:.1f} MiB"


def _session(args, kwargs) -> str:
    return f"session: twins {kwargs.get('twins', 1)}, streamed {kwargs.get('streamed')}"


def instrument(profile_dir: str | None) -> None:
    from onnxsurgery.api import quantizing
    from onnxsurgery.running import runs, sessions

    runs.open_session = timed(_session, runs.open_session)
    runs.run = timed(_feeds, runs.run)
    quantizing.write_checked = timed("write_checked (write, then check)", quantizing.write_checked)
    quantizing.compare_models = timed("compare_models", quantizing.compare_models)
    if profile_dir is not None:
        settings = sessions.session_settings

        def profiled(**options):
            opts, kwargs = settings(**options)
            opts.enable_profiling = True
            opts.profile_file_prefix = os.path.join(profile_dir, "ort")
            return opts, kwargs
        sessions.session_settings = profiled


def summarize_profiles(profile_dir: str, top: int = 6) -> list[dict]:
    """Each onnxruntime profile in `profile_dir`: its session's phases (ms) and top operators."""
    out = []
    for path in sorted(glob.glob(os.path.join(profile_dir, "ort*.json"))):
        with open(path) as f:
            events = json.load(f)
        phases, kernels, counts = {}, collections.Counter(), collections.Counter()
        for e in events:
            if e.get("cat") == "Session":
                phases[e["name"]] = phases.get(e["name"], 0.0) + e["dur"] / 1e3
            elif e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                kernels[e["args"]["op_name"]] += e["dur"] / 1e3
                counts[e["args"]["op_name"]] += 1
        out.append({"file": os.path.basename(path), "phases_ms": {k: round(v, 1) for k, v in phases.items()},
                    "ops_ms": {k: [round(v, 1), counts[k]] for k, v in kernels.most_common(top)}})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ort-profile", metavar="DIR", help="onnxruntime's profile of each session, written there")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the onnxsurgery command and its arguments")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.ort_profile:
        os.makedirs(args.ort_profile, exist_ok=True)
    load = os.getloadavg()[0]
    instrument(args.ort_profile)
    from onnxsurgery.cli import main as cli

    code = 0
    try:
        cli(command, standalone_mode=False)
    except SystemExit as e:
        code = e.code or 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "command": command, "load": load, "wall": round(time.perf_counter() - START, 2),
        "user": round(usage.ru_utime, 2), "sys": round(usage.ru_stime, 2), "minor_faults": usage.ru_minflt,
        "phases": [{"thread": t, "what": w, "from": round(a, 2), "to": round(b, 2), "thread_cpu": round(c, 2)}
                   for t, w, a, b, c in sorted(LOG, key=lambda r: r[2])],
        "onnxruntime": summarize_profiles(args.ort_profile) if args.ort_profile else [],
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return code
    for p in result["phases"]:
        print(f"{p['thread'][:16]:16s} {p['from']:7.2f} -> {p['to']:7.2f} s  wall {p['to'] - p['from']:6.2f}  "
              f"thread CPU {p['thread_cpu']:5.2f}  {p['what']}")
    for s in result["onnxruntime"]:
        print(s["file"], s["phases_ms"])
        for op, (ms, n) in s["ops_ms"].items():
            print(f"    {op:24s} {ms:8.1f} ms x{n}")
    print(f"wall {result['wall']} s, user {result['user']} s, sys {result['sys']} s, minor faults "
          f"{result['minor_faults']}, load {load:.1f} at the start")
    return code


if __name__ == "__main__":
    sys.exit(main())
