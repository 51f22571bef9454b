# Two commands do everything: `make lab` and `make test`. Both set up .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test test-fast bench fidelity fidelity-check opinfo clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first, so the package's torch requirement is already met.
	$(PY) -m pip install -q "torch==2.13.0"
	# compat mode puts the checkout on sys.path, so packages added later import without a reinstall.
	$(PY) -m pip install -q -e ".[dev]" --config-settings editable_mode=compat
	# The device's C++ hooks (backend/device/csrc) need g++ and ninja: Debian packages when missing.
	command -v g++ >/dev/null && command -v ninja >/dev/null || \
	  { apt-get install -y -q g++ ninja-build >/dev/null 2>&1 || sudo -n apt-get install -y -q g++ ninja-build >/dev/null 2>&1 || \
	    echo "warning: no g++/ninja: the neuron device runs without torch.UntypedStorage and torch.accelerator support"; }
	# Build them now (once, ~15 s), not inside the first test's `import torch`.
	$(PY) -c "import torch, backend.device"
	touch $(STAMP)

# The quickstart's first cell loads the magics (%load_ext workbench). Root (containers) needs --allow-root.
lab: $(STAMP)
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) notebooks/01_quickstart.ipynb

# Every test but the long sweeps (`fidelity-check`), which CI runs after this.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not sweep"

test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow and not browser and not sweep"

bench: $(STAMP)
	$(PY) -m benchmarks

fidelity: $(STAMP)
	$(PY) -m benchmarks.fidelity

# Recompute the fidelity table and fail when a ratio moved without docs/fidelity.json moving (~8 min).
fidelity-check: $(STAMP)
	$(PY) -m pytest -q -m sweep tests/fidelity/test_fidelity_table.py

# Every OpInfo op on neuron against CPU (fp32, fp32 gradients, bf16); prints match rates.
opinfo: $(STAMP)
	$(PY) tests/device/opinfo_sweep.py

clean:
	rm -rf $(VENV) build *.egg-info
