# zerohop — every target sets itself up from a fresh clone.
#   make test   fmt + clippy + rustdoc -D warnings + cargo test + Miri + the C/C++ and Rust
#               examples + pytest + stubtest + mypy --strict + docs + valgrind + short fuzz runs
#   make fuzz   every fuzz target for FUZZ_SECONDS (default 300) each
#   make install   the C library, its headers, pkg-config and CMake files into PREFIX
#               (default /usr/local; DESTDIR stages; needs cargo only: no venv, no CMake)
#   make demo   the ECG pipeline on the bundled recording (plots + report in out/ecg)
#   make bench  criterion benches + cross-framework latency table
#   make test-tch / bench-tch   the `tch` feature in a venv of its own (torch 2.13; see README)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MATURIN := $(VENV)/bin/maturin
# maturin develop installs into the environment VIRTUAL_ENV names, and pyo3's build script
# takes its interpreter from there too, so every cargo target needs the venv first.
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: all venv develop install test fmt-check fuzz-build pytest-library pytest-app cpp-run valgrind-capi clippy doc-check test-rust miri cpp-example pytest stubtest typecheck docs valgrind fuzz fuzz-smoke demo bench test-tch bench-tch clean

all: test

# TORCH_INDEX=https://download.pytorch.org/whl/cpu installs torch's CPU-only build (~0.2 GB)
# before the rest; by default torch comes from the package index with its CUDA libraries.
TORCH_INDEX ?=
INSTALL_TORCH = $(if $(TORCH_INDEX),$(PY) -m pip install -q torch --index-url $(TORCH_INDEX))

# The packages go in with uv where it can be had (pip installs it first): on 2 cores it filled
# the test venv in 51 s where pip took 132 s (parallel downloads and unpacking), with the same
# versions. Bytecode is compiled at install, as pip does: where PYTHONDONTWRITEBYTECODE is set
# (this machine sets it) every process would compile torch's modules again, which cost the
# app's tests 45 s. uv's cache lives in the venv, whose files it hard-links: nothing stays
# behind when the venv goes. pip installs them when uv cannot be had or fails.
INSTALL_REQUIREMENTS = if $(PY) -m pip install -q uv && [ -x $(VENV)/bin/uv ] \
	  && UV_CACHE_DIR=$(abspath $(VENV))/.uv-cache $(VENV)/bin/uv pip install -q --compile-bytecode \
	    --python $(PY) -r $(1); then :; \
	else $(PY) -m pip install -q -r $(1); fi

$(VENV)/.installed: requirements-dev.txt requirements-demo.txt requirements-docs.txt
	bash scripts/check-disk.sh . 22 "make test (the venv and cargo's target folder)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(INSTALL_TORCH)
	$(call INSTALL_REQUIREMENTS,requirements-dev.txt)
	touch $@ $(VENV)/.demo-installed

# The demo needs only the ECG job's packages; a venv made for the tests has them too.
$(VENV)/.demo-installed: requirements-demo.txt
	bash scripts/check-disk.sh . 8 "make demo (torch and the ECG job's packages)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(INSTALL_TORCH)
	$(call INSTALL_REQUIREMENTS,requirements-demo.txt)
	touch $@

venv: $(VENV)/.installed

# The library's extension, then the ECG app's package (apps/ecg: its own extension over the
# zerohop-ecg crate, a client of the library's public API), built in release mode so tests and
# benches see real speed.
APP_DEVELOP = cd apps/ecg && VIRTUAL_ENV=$(abspath $(VENV)) $(abspath $(MATURIN)) develop --release -q
develop: venv
	$(MATURIN) develop --release -q
	$(APP_DEVELOP)

fmt-check:
	cargo fmt --all -- --check

# The extension enables the core's `cuda` and `arrow` features; the Rust targets name `arrow`
# themselves so its tests run without the extension.
clippy: venv
	cargo clippy --workspace --all-targets --features zerohop/arrow,zerohop/ndarray -- -D warnings

test-rust: venv
	cargo test --workspace --exclude zerohop-python --features zerohop/arrow-compute,zerohop/ndarray
	# The Rust SoA → tensors → model → output column example (ndarray views, pointer checks).
	cargo run -q -p zerohop --features ndarray --example soa_inference 1000
	# The same over buffers the example allocates itself (CMS's layout), wrapped, in batches.
	cargo run -q -p zerohop --features ndarray --example cms_wrap 10000 1000
	# A project outside the workspace that depends on zerohop as a user's does (docs/rust.md);
	# it shares this tree's target folder, so the crates it needs are built once.
	CARGO_TARGET_DIR=$(abspath target) cargo run -q --manifest-path examples/rust-consumer/Cargo.toml
	CARGO_TARGET_DIR=$(abspath target) cargo clippy -q --manifest-path examples/rust-consumer/Cargo.toml -- -D warnings
	# The host-side parts of the ECG crate's CUDA module (its PTX cache); no GPU needed.
	cargo test -p zerohop-ecg --features cuda --lib gpu::

# Host-side unsafe code under Miri. If the component cannot be installed (no network to
# the Rust distribution server), say so loudly and go on rather than fail.
# The ECG crate's unsafe (the VAE pass over borrowed views) runs on a rayon pool, whose
# crossbeam-epoch casts integers to pointers (Stacked Borrows rejects it, Tree Borrows not) and
# keeps its global collector to the end (not a leak of ours).
# Miri interprets on one core: each step runs two test processes at once (the core's tests
# split by module, about 70 and 55 s; the C ABI's beside the ECG crate's), and `wait` passes
# a failure on.
miri:
	@if rustup +nightly component list --installed 2>/dev/null | grep -q '^miri' \
	   || rustup component add miri rust-src --toolchain nightly; then \
	  cargo +nightly miri test -p zerohop --lib --features arrow,ndarray --no-run; \
	  cargo +nightly miri test -p zerohop --lib --features arrow,ndarray -- memory:: soa:: & core=$$!; \
	  cargo +nightly miri test -p zerohop --lib --features arrow,ndarray -- --skip memory:: --skip soa::; \
	  wait $$core; \
	  cargo +nightly miri test -p zerohop-capi --no-default-features --test api --test wrap --test columns --test streams --test panics --test blocks --test layout --test wording --test guard --test libtorch_plan & capi=$$!; \
	  MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-ignore-leaks" cargo +nightly miri test -p zerohop-ecg --lib vae::views; \
	  wait $$capi; \
	else \
	  echo; echo "################################################################"; \
	  echo "## WARNING: Miri could not be installed; Miri tests were SKIPPED ##"; \
	  echo "################################################################"; echo; \
	fi

pytest: pytest-library pytest-app

pytest-library: develop
	$(PY) -m pytest -q tests

# The ECG app's own tests (apps/ecg/tests, their own conftest) and its layer check.
pytest-app: develop
	$(PY) -m pytest -q apps/ecg/tests
	$(PY) scripts/check-app.py
	# TensorFlow in a process of its own: its LLVM and torch's triton abort together.
	ZEROHOP_TENSORFLOW_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_tensorflow.py

# The extension's .pyi stubs against the built module (mypy's stubtest); fails on any
# disagreement.
stubtest: develop
	PY=$(PY) bash scripts/stubtest.sh

# A user's script over the public API under mypy --strict (no type: ignore), then run; and the
# pure-Python modules annotated so far, checked as strictly.
typecheck: develop
	$(PY) -m mypy --config-file tests/typing/mypy.ini tests/typing/public_api.py
	cd python && ../$(PY) -m mypy --config-file ../tests/typing/mypy.ini -m zerohop.memory -m zerohop._install -m zerohop.cuda -m zerohop.tour
	# The ECG app, every module, as strictly.
	cd apps/ecg/python && ../../../$(PY) -m mypy --config-file ../../../tests/typing/mypy.ini \
	  -m zerohop_ecg -m zerohop_ecg.kernels -m zerohop_ecg.config -m zerohop_ecg.detection -m zerohop_ecg.text -m zerohop_ecg.output -m zerohop_ecg.errors -m zerohop_ecg.adam -m zerohop_ecg.step -m zerohop_ecg.cpu_pass -m zerohop_ecg.report -m zerohop_ecg.batch_report -m zerohop_ecg.plots -m zerohop_ecg.figure_workers -m zerohop_ecg.recording -m zerohop_ecg.sources -m zerohop_ecg.edf_source -m zerohop_ecg.outliers -m zerohop_ecg.records -m zerohop_ecg.workers -m zerohop_ecg.vae -m zerohop_ecg.quality -m zerohop_ecg.pipeline -m zerohop_ecg.batch -m zerohop_ecg.__main__ -m zerohop_ecg.malloc
	$(PY) tests/typing/public_api.py

# The reference site (mkdocs.yml, docs/ -> site/), every MkDocs warning an error.
docs: develop
	PY=$(PY) bash scripts/docs-build.sh --quiet

# The Python tests that drive the extension through NumPy, once under valgrind's memcheck
# (not AddressSanitizer: an ASan build of the extension needs an ASan-instrumented Python).
# Fails on any error in zerohop's frames and on any invalid write or free anywhere; CPython's
# and the loader's known valgrind noise is reported but not fatal. Loud skip without valgrind.
valgrind: develop
	PY=$(PY) bash scripts/valgrind-pytest.sh

# cargo-fuzz targets (fuzz/, its own workspace, nightly + AddressSanitizer): the DLPack
# importer, the array-interface dict parser, the Arrow C data importer, schemas + tensor maps,
# and the CSV reader. `make fuzz` runs each for FUZZ_SECONDS; `make test` runs each briefly.
# Loud skip when nightly or cargo-fuzz cannot be had.
FUZZ_SECONDS ?= 300
fuzz:
	bash scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz-smoke:
	bash scripts/fuzz.sh 5

fuzz-build:
	bash scripts/fuzz.sh build

# The Rust API reference, with every rustdoc warning (broken links, stray HTML) an error.
doc-check: venv
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -q -p zerohop -p zerohop-ecg -p zerohop-derive -p zerohop-capi \
	  --features zerohop/arrow,zerohop/cuda,zerohop/ndarray,zerohop-ecg/cuda

# The C ABI from C and C++: the C smoke test and the libtorch examples (examples/cpp), built
# against an install of the library (scripts/install.sh) through its pkg-config file, run on
# the CPU, then both again under valgrind's memcheck (errors in zerohop's frames fail it).
# With a CUDA build of torch, the example is also compiled with its libtorch CUDA allocator hook
# (the CUDA runtime's headers come from PyPI into target/cuda-include); it runs on the CPU here.
# Then `make install` into a staging DESTDIR, the prefix moved, and C and C++ programs built from
# it alone with pkg-config and with find_package(zerohop), shared and static
# (examples/install-consumer; the venv's cmake).
cpp-example: cpp-run
	$(MAKE) valgrind-capi

cpp-run: venv
	inc=$$(PY=$(PY) bash examples/cpp/cuda-headers.sh target/cuda-include || true); \
	  PY=$(PY) ZH_CUDA_INCLUDE=$$inc bash examples/cpp/run.sh cpu 1000
	PY=$(PY) bash examples/install-consumer/run.sh

# The binaries cpp-run built, under valgrind.
valgrind-capi:
	PY=$(PY) bash scripts/valgrind-capi.sh

# Two cores, packed: the fuzz targets (nightly, AddressSanitizer, no Python) build while the
# venv fills (that mostly waits on downloads) and then beside clippy; the one-core checks
# (valgrind over the C++ example, the stubs, mypy, the site) run beside the library's Python
# tests, which time nothing. The app's tests, one of which compares two timings, run alone.
test: fmt-check
	$(MAKE) -j2 --output-sync=target fuzz-build clippy doc-check
	$(MAKE) test-rust miri cpp-run
	$(MAKE) -j2 --output-sync=target pytest-library valgrind-capi stubtest typecheck docs
	# -o develop: the extensions were built just above.
	$(MAKE) -o develop pytest-app valgrind fuzz-smoke

# zerohop's C library for C and C++ programs: lib/libzerohop_capi.{so,a}, include/zerohop.h and
# zerohop_torch.h, lib/pkgconfig/zerohop{,-static}.pc, lib/cmake/zerohop/ (docs/cpp.md). Only
# cargo is needed. NO_BUILD=1 installs an earlier build (`sudo make install NO_BUILD=1`).
PREFIX ?= /usr/local
install:
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' NO_BUILD='$(NO_BUILD)' bash scripts/install.sh

demo: $(VENV)/.demo-installed
	$(MATURIN) develop --release -q
	$(APP_DEVELOP)
	$(PY) -m zerohop_ecg --out out/ecg

bench: develop
	$(PY) -m pip install -q -r requirements-bench.txt
	cargo bench -p zerohop --bench dlpack
	cargo bench -p zerohop-capi --bench capi
	PY=$(PY) bash examples/cpp/run.sh bench 1000
	$(PY) bench/dlpack_latency.py --out bench/results/dlpack_latency.md
	$(PY) bench/table_tensors.py --out bench/results/table_tensors.md
	$(PY) bench/ecg_pipeline.py --out bench/results/ecg_pipeline_cpu.md
	BENCH_DATE=$$(date -u +%F) ZEROHOP_BENCH_OUT=bench/results/memory_pool.md cargo bench -p zerohop --bench memory
	# docs/benchmarks.md is generated from bench/results/.
	$(PY) scripts/benchmarks-page.py

# The `tch` feature needs the libtorch its tch release pins (tch 0.26: torch 2.13), which is
# not the venv's torch, so it has a venv of its own and is not part of `make test` (see the
# README). torch-sys finds libtorch through that venv's python; the binaries find it at run
# time through LD_LIBRARY_PATH.
TCH_VENV := .venv-tch
TCH_TORCH := 2.13.0
TCH_ENV = VIRTUAL_ENV=$(abspath $(TCH_VENV)) PATH=$(abspath $(TCH_VENV))/bin:$$PATH \
  LIBTORCH_USE_PYTORCH=1 \
  LD_LIBRARY_PATH=$$($(TCH_VENV)/bin/python -W ignore -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib

$(TCH_VENV)/.installed:
	$(PYTHON) -m venv $(TCH_VENV)
	$(TCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(TCH_VENV)/bin/python -m pip install -q torch==$(TCH_TORCH)
	touch $@

test-tch: $(TCH_VENV)/.installed
	$(TCH_ENV) cargo test -p zerohop --features tch --test tch
	$(TCH_ENV) cargo run -q -p zerohop --features tch --example tch_inference 1000
	$(TCH_ENV) cargo clippy -p zerohop --features tch --all-targets -- -D warnings

bench-tch: $(TCH_VENV)/.installed
	$(TCH_ENV) cargo bench -p zerohop --features tch --bench tch_map

clean:
	cargo clean
	rm -rf $(VENV) $(TCH_VENV)
