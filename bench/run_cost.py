"""What one onnxruntime run of a model on the user's samples costs under each session setting
that `quant --inputs` could choose (issue 58, inputs13): the memory arena on or off, one intra-op
thread or the default (one per core). Each setting in a fresh process of its own, in turn, so
that one setting's heap does not carry into the next; idle threads sleep (no spinning) and Conv
weights take the blocked layout, as the capture's, the candidates' and verification's sessions
do (running/sessions.py).

    python bench/run_cost.py MODEL.onnx tune.npz [--rounds N]

Prints, per setting and round, the session's CPU, each sample's run as CPU (user+sys) / system /
wall seconds, and the process's peak RSS. A `quant --inputs` runs the original once per sample
(the capture, also verification's reference) and the result once per sample (a candidate's runs,
taken by verification, or verification's own), so twice these runs are its floor."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SETTINGS = {"default": (False, 0), "one thread": (False, 1), "arena": (True, 0), "arena, one thread": (True, 1)}


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime


def measure(model: str, samples: str, arena: bool, threads: int) -> dict:
    """One process's figures (run in the child)."""
    import onnxruntime as ort

    from onnxsurgery.running.samples import load_input_samples

    feeds = load_input_samples(samples)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    opts.enable_cpu_mem_arena, opts.enable_mem_pattern = arena, False
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.intra_op_num_threads = threads
    start, _ = _cpu()
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    made, _ = _cpu()
    runs = []
    for feed in feeds:
        (cpu, system), wall = _cpu(), time.perf_counter()
        sess.run(None, feed)
        (cpu2, system2), wall2 = _cpu(), time.perf_counter()
        runs.append((round(cpu2 - cpu, 3), round(system2 - system, 3), round(wall2 - wall, 3)))
    return {"session": round(made - start, 3), "runs": runs,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--child":
        print(json.dumps(measure(argv[1], argv[2], argv[3] == "1", int(argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("samples")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    for round_ in range(args.rounds):
        for label, (arena, threads) in SETTINGS.items():
            out = subprocess.run([sys.executable, __file__, "--child", args.model, args.samples, str(int(arena)),
                                  str(threads)], capture_output=True, text=True, check=True).stdout
            got = json.loads(out)
            runs = " ".join(f"{c:.2f}/{s:.2f}/{w:.2f}" for c, s, w in got["runs"])
            total = got["session"] + sum(c for c, _, _ in got["runs"])
            print(f"round {round_ + 1} {label:18} session {got['session']:.2f} runs (cpu/sys/wall) {runs}  "
                  f"cpu {total:.2f} s, peak RSS {got['peak_rss_mb']} MB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
