"""`quant --target onnxruntime-web` (int8 and int4) of zoo models meant for the browser, loaded in
onnxruntime-web (WASM, headless Chromium: tests/web, `make install-web` first), each file's outputs
on the first report sample against Python onnxruntime set up as for onnxruntime-web, and the
task's decisions against the float model's. Prints one line a file; exits 1 where one fails.

    python zoo/web.py --only silero_vad_v5_web gutenye_rec_opset9
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "web"))

from zoo import decisions, inputs  # noqa: E402
from zoo.fetch import fetch  # noqa: E402
from zoo.models import BY_NAME  # noqa: E402

FORMS = {"": [], ".web": ["--target", "onnxruntime-web"], ".web4": ["--target", "onnxruntime-web", "--dtype", "int4"]}


def _outputs(path: Path, feeds: dict) -> dict:
    from onnxsurgery.running.sessions import session

    sess = session(path, runtime="onnxruntime-web")
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def main(argv: list[str] | None = None) -> int:
    from browser import run_in_browser

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", required=True)
    args = ap.parse_args(argv)
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder, jobs = Path(tmp), []
        for name in args.only:
            m = BY_NAME[name]
            src = fetch(m)
            shutil.copy(src, folder / f"{name}.onnx")
            for tag, extra in FORMS.items():
                if extra and subprocess.run([sys.executable, "-m", "onnxsurgery", "quant", str(src),
                                             str(folder / f"{name}{tag}.onnx"), *extra], cwd=ROOT).returncode:
                    failed += 1
                    continue
                jobs.append((m, f"{name}{tag}.onnx", inputs.build(m, src, "report")[0]))
        for (m, file, feeds), r in zip(jobs, run_in_browser(folder, [(f, feeds) for _, f, feeds in jobs])):
            if not r["ok"] or r["errors"]:
                failed += 1
                print(f"{file}: FAILED in onnxruntime-web: {r.get('error') or r['errors'][:2]}")
                continue
            python = _outputs(folder / file, feeds)
            rel = max(float(np.linalg.norm(r["outputs"][k] - v) / (np.linalg.norm(v) or 1)) for k, v in python.items())
            decide = getattr(decisions, m.decision)
            got, want = decide(r["outputs"], feeds)[0], decide(_outputs(folder / f"{m.name}.onnx", feeds), feeds)[0]
            kept = float(np.mean(got == want)) if got is not None else float("nan")
            print(f"{file}: {(folder / file).stat().st_size / 1e6:.2f} MB, web vs Python {rel:.1e}, "
                  f"decisions kept {kept:.3f}, wasm memory after session creation "
                  f"{r['memory_after'] / 2**20:.1f} MB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
