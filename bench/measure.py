"""Run a command; print its wall time and CPU time (user + system, s: its children's too) and peak
RSS (bytes) as JSON on stdout.

A separate small process: a child forked from a large parent inherits the parent's peak RSS,
so the benchmark runs each tool through this launcher to get the tool's own figure.
"""

import json
import resource
import subprocess
import sys
import time

start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
peak = usage.ru_maxrss * 1024
cpu = usage.ru_utime + usage.ru_stime  # on a shared machine, closer to the time alone than wall
err = proc.stderr.decode(errors="replace").strip().splitlines()
print(json.dumps({"wall": wall, "cpu": cpu, "peak": peak, "code": proc.returncode, "error": err[-1] if err else ""}))
