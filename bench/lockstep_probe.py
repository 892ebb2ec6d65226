"""Issue 58's lockstep idea, measured before it is built: the result's twinned verification graph
(verify.py's streamed pass over a decoder's batches) cut into stages that run one after the other,
each its own session over the same data file, against the whole graph's one session.

    python bench/lockstep_probe.py REFERENCE.onnx RESULT.onnx [--stages 6] [--repeat 3]
        [--beside "quant IN OUT --no-verify"]

It compares the two in this process (compare_models, as `quant` does) with onnxruntime's session
loader watched, to capture the result's twinned stub, its settings and its one run's feeds; then
it times, alternating, the whole graph (session + run) and the stages (every session + the chained
runs), checks their outputs bit for bit, and gives the values in flight between stages. With
`--beside`, each timing is also taken with that command (a fresh process: the quantizer as the
writer would be) started at the same moment: how much of the pass overlaps it on this machine.
Measured, not decided: nothing here changes what `quant` computes or writes.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnxsurgery.running import runs, sessions  # noqa: E402
from onnxsurgery.running.stages import split_stages, stage_cuts  # noqa: E402
from onnxsurgery.running.verify import compare_models  # noqa: E402


def capture(reference: str, result: str):
    """(stub ModelProto, settings maker, data folder, output names, feeds) of the result's run."""
    loads, ran = [], []
    load, run = sessions._load, runs.run

    def watched_load(source, settings, data_dir=None):
        if isinstance(source, str) and data_dir is not None:
            loads.append((Path(source).read_bytes(), Path(data_dir).resolve()))
        return load(source, settings, data_dir)

    def watched_run(sess, names, feeds):
        ran.append((list(names), dict(feeds)))
        return run(sess, names, feeds)

    sessions._load, runs.run = watched_load, watched_run
    try:
        check = compare_models(reference, result, fold_candidate=None)
    finally:
        sessions._load, runs.run = load, run
    folder = Path(result).resolve().parent
    stub, data_dir = [(s, d) for s, d in loads if d == folder][-1]
    names, feeds = ran[-1]
    return onnx.load_from_string(stub), data_dir, names, feeds, check


def settings():
    # as verify.py opens the result's twinned session: streamed, beside, 2 copies, unfolded
    return sessions.session_settings(streamed=True, beside=True, twins=2, fold_constants=False)


def whole(stub: onnx.ModelProto, data_dir: Path, names, feeds, tmp: Path):
    path = tmp / "whole.onnx"
    path.write_bytes(stub.SerializeToString())
    t0, c0 = time.perf_counter(), time.process_time()
    sess = sessions._load(str(path), settings(), data_dir)
    t1, c1 = time.perf_counter(), time.process_time()
    out = sess.run(names, feeds)
    t2, c2 = time.perf_counter(), time.process_time()
    return out, (t1 - t0, c1 - c0, t2 - t1, c2 - c1)


def spill_size(pid: int, folder: Path):
    """The size of the nameless spill file process `pid` holds in `folder` (storage/spill.py),
    or None while it has none."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(str(folder)) and ("(deleted)" in target or "/#" in target):
                return os.stat(f"/proc/{pid}/fd/{fd}").st_size
        except OSError:
            continue
    return None


def staged(stages, data_dir: Path, names, feeds, tmp: Path, gate=None):
    """The stages' sessions and chained runs. `gate` (pid, its output folder, its Popen, its spill's
    final size): each stage's session made and run only once that process's spill file holds its
    share of the bytes of the stages up to it (lockstep's timing: the quantizer writes weights in
    the graph's order), and freed after; the last one once the spill is whole or the command done."""
    paths = []
    for k, stage in enumerate(stages):
        p = tmp / f"stage{k}.onnx"
        p.write_bytes(stage.model.SerializeToString())
        paths.append(p)
    t0, c0 = time.perf_counter(), time.process_time()
    if gate is None:
        sess = [sessions._load(str(p), settings(), data_dir) for p in paths]
    else:
        sess, waited, done = [None] * len(paths), 0.0, 0
        cumulative = np.cumsum([stage.payload_bytes for stage in stages])
        # the spill's own final size, seen in the command's run alone (`spilled`): some payloads
        # never spill (float tables left as they were, small ones held); scaled to it, the last
        # stage waits for the whole spill and the others for their share of it
        cumulative = cumulative * (gate[3] / cumulative[-1])
    t1, c1 = time.perf_counter(), time.process_time()
    values = dict(feeds)
    flight = 0
    for k, stage in enumerate(stages):
        ins, outs = stage.inputs, stage.outputs
        if gate is not None:
            w = time.perf_counter()
            while done < cumulative[k]:
                size = spill_size(gate[0], gate[1])
                if size is None and gate[2].poll() is not None:
                    break  # the command is done (its spill adopted): everything is written
                done = max(done, size or 0)
                if done < cumulative[k]:
                    time.sleep(0.01)
            waited += time.perf_counter() - w
            sess[k] = sessions._load(str(paths[k]), settings(), data_dir)
        got = sess[k].run(outs, {i: values[i] for i in ins})
        sess[k] = None  # its session freed once it ran, as lockstep would
        values.update(zip(outs, got))
        later = {i for later_stage in stages[k + 1:] for i in later_stage.inputs}
        # what a later stage still reads (the graph's own outputs are kept for the comparison)
        flight = max(flight, sum(v.nbytes for n, v in values.items() if n in later and n not in feeds))
    t2, c2 = time.perf_counter(), time.process_time()
    if gate is not None:
        print(f"gated: {waited:.3f} s waiting for the spill", flush=True)
    return [values[n] for n in names], (t1 - t0, c1 - c0, t2 - t1, c2 - c1), flight


class AnonPeak:
    """This process's RssAnon, sampled every 5 ms on a thread: its peak above the start's."""

    def __enter__(self):
        import threading

        self.start = self.peak = _anon()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()
        return self

    def _poll(self):
        while not self.stop.wait(0.005):
            self.peak = max(self.peak, _anon())

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.grown = max(self.peak, _anon()) - self.start


def _anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def watched(cmd):
    """`cmd` started, and a thread that notes when it ends (`proc.ended`, perf_counter)."""
    import threading

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    proc.ended = None

    def note():
        proc.wait()
        proc.ended = time.perf_counter()

    threading.Thread(target=note, daemon=True).start()
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference")
    ap.add_argument("result")
    ap.add_argument("--stages", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--beside", help="a command started with each timing (quant ... --no-verify)")
    ap.add_argument("--gated", action="store_true",
                    help="with --beside: each stage waits for the command's spill file to hold its bytes")
    args = ap.parse_args()
    tmp = Path(os.environ.get("PROBE_TMP", "/tmp/lockstep-probe"))
    tmp.mkdir(parents=True, exist_ok=True)
    stub, data_dir, names, feeds, _ = capture(args.reference, args.result)
    print(f"stub: {len(stub.graph.node)} nodes, {len(stub.graph.initializer)} initializers; "
          f"{len(feeds)} feeds, {len(names)} outputs", flush=True)
    cuts = stage_cuts(stub, args.stages)
    stages = split_stages(stub, cuts)
    print("cuts at nodes", cuts, "crossing values per cut:", [len(s.inputs) for s in stages[1:]], flush=True)
    beside = [sys.executable, "-m", "onnxsurgery", "-q", *shlex.split(args.beside)] if args.beside else None
    rows = []
    spilled = 0  # the command's spill file's final size, from its run alone
    folder = Path(shlex.split(args.beside)[2]).resolve().parent if beside else None  # quant IN OUT: OUT's
    for r in range(args.repeat):
        for label in ("alone", "whole", "staged") if beside else ("whole", "staged"):
            proc = watched(beside) if beside else None
            t = time.perf_counter()
            if label == "alone":  # the command by itself: what the pass beside it adds
                while proc.ended is None:  # and its spill's largest size (the gate's scale)
                    spilled = max(spilled, spill_size(proc.pid, folder) or 0) if args.gated else 0
                    time.sleep(0.01)
                print(f"alone  the command by itself {time.perf_counter() - t:.3f} s; its spill {spilled} bytes",
                      flush=True)
                continue
            with AnonPeak() as anon:
                if label == "whole":
                    out, times = whole(stub, data_dir, names, feeds, tmp)
                    flight = 0
                else:
                    gate = (proc.pid, folder, proc, spilled) if args.gated and proc and spilled else None
                    out, times, flight = staged(stages, data_dir, names, feeds, tmp, gate)
            mine = time.perf_counter() - t
            both = None
            if proc is not None:
                proc.wait()
                while proc.ended is None:
                    time.sleep(0.001)
                both = time.perf_counter() - t
                print(f"the command took {proc.ended - t:.3f} s; the pass ended {mine - (proc.ended - t):+.3f} s "
                      "after it", flush=True)
            if r == 0 and label == "whole":
                reference_out = out
            same = all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(out, reference_out))
            rows.append((label, *times, mine, both, flight, same))
            print(f"{label:6s} session {times[0]:.3f} s wall {times[1]:.3f} CPU, run {times[2]:.3f} wall "
                  f"{times[3]:.3f} CPU; all {mine:.3f} s" + (f", with the command beside {both:.3f} s" if both else "")
                  + f"; RssAnon +{anon.grown / 2**20:.1f} MiB at its peak; in flight {flight / 2**20:.2f} MiB; "
                  f"bit-identical to the whole run: {same}", flush=True)
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
