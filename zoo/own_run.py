"""One run of a model in onnxruntime (a default CPU session) on the first sample of an .npz, in
a fresh process: what running the model itself holds (its activations), which any command that
runs it (verification, compare, --inputs) holds too. zoo/run.py measures this process's peak; the
process prints its own RssAnon before the session, which `own_growth` takes off the peak (this
interpreter holds less than onnxsurgery's CLI, whose baseline the bound counts already)."""

import sys


def own_growth(ran, baseline: int) -> int:
    """What the run of the model alone grew by: its peak over the RssAnon it printed before the
    session. Over the CLI's `baseline` instead (no line), the bare onnxruntime process's smaller
    interpreter was counted against the activations (the seal detector at 736 x 736: 164 MB
    counted of the 188 MB its session holds)."""
    words = ran.stdout.split()
    start = int(words[-1]) if words and words[-1].isdigit() else baseline
    return max(0, ran.peak_anon - start)


def model_file(model: str) -> str:
    """The .onnx to load: `model`, or the one in the folder `model` names (the folder variant,
    which onnxruntime cannot open as a path: the run failed at once and counted no activations,
    so that variant's bound was terrain_diffusion's 190 MB where the shipped one's was 397 MB)."""
    from pathlib import Path

    path = Path(model)
    return str(next(iter(sorted(path.glob("*.onnx"))), path) if path.is_dir() else path)


def main(model: str, npz: str) -> None:
    import numpy as np
    import onnxruntime as ort

    data = np.load(npz)
    print(next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("RssAnon")),
          flush=True)
    session = ort.InferenceSession(model_file(model), providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    # the first sample: NAME__0 where the file holds several, NAME where it holds one (--inputs' format)
    feeds = {k.rsplit("__", 1)[0]: data[k] for k in data.files
             if k.endswith("__0") and k.rsplit("__", 1)[0] in wanted}
    feeds = feeds or {k: data[k] for k in data.files if k in wanted}
    session.run(None, feeds)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
