# memtrace — the two commands of the README, on a fresh Debian machine:
#
#   make demo    build memtrace and one guest, trace the built-in Cortex-M4 example
#   make test    build everything and run all tests
#
# Both install missing system packages with apt-get (as root, or via sudo).
# Cargo builds reuse a target directory outside the clone, because unicorn and
# polars take minutes to compile on a small machine.

CARGO_TARGET_DIR ?= $(HOME)/.cache/memtrace-target
export CARGO_TARGET_DIR
CARGO ?= cargo
MEMTRACE := $(CARGO_TARGET_DIR)/release/memtrace
DEMO_OUT ?= demo-out
# Python venv with PyPI `tflite-micro`: the real TFLM that `make test`
# compares memtrace verify's outputs and arenas against.
ORACLE_VENV ?= $(HOME)/.cache/memtrace-venv

# Debian packages: the emulator build (cmake, libclang for bindgen), the
# Cortex-M cross compiler with its C and C++ libraries, host C/C++, musl's
# static libc.a (libm without IFUNCs for the x86-64 TFLM runner).
APT_PACKAGES := cmake libclang-dev gcc-arm-none-eabi libnewlib-arm-none-eabi \
    libstdc++-arm-none-eabi-newlib gcc g++ musl-dev make python3 python3-venv ruby
# Only for the other cores (`cores`, `cores-tested`, so `make test`, never
# `make demo`): the RISC-V cross compiler and its C library, picolibc (1 GB
# of multilibs installed).
CORE_APT_PACKAGES := gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf

# Where `make install` links the binary (the usual place of per-user
# executables; pip and cargo-binstall use it too).
BINDIR ?= $(HOME)/.local/bin

.PHONY: all demo demo-guests test bench lint golden fuzz deps core-deps qemu-deps qemu-guests guests cores cores-tested build install link oracle wheel clean

all: build

deps:
	@bash scripts/install-deps.sh $(APT_PACKAGES)

guests: deps
	$(MAKE) -C harness-c -j2
	$(MAKE) -C harness-c tflm-apps tflm-kernel-tests -j2
	$(MAKE) -C harness-c/unit-tests -j2

# The other cores' kernel suites and TFLM runners (cortex-m0, -m3, -m7, -m33,
# and riscv32 with the reference kernels): all of them for
# scripts/cores-table.py (`cores`), or what tests/models/cores.rs and
# riscv.rs run (`cores-tested`, which `make test` builds).
# Never built by `make build` or `make demo`.
cores: deps core-deps
	$(MAKE) -C harness-c -j2 cores

cores-tested: deps core-deps
	$(MAKE) -C harness-c -j2 cores-tested

core-deps:
	@bash scripts/install-deps.sh $(CORE_APT_PACKAGES)

# memtrace's QEMU engine (the Cortex-M55): QEMU 10 from Debian's
# bookworm-backports, glib's headers for the plugin, the plugin and the
# AN547 board's guests (`make test`, never `make demo`).
qemu-deps:
	@bash scripts/install-qemu.sh

qemu-guests: deps qemu-deps
	$(MAKE) -C harness-c -j2 qemu-tested

build: deps guests
	$(CARGO) build --release --workspace

# `memtrace` on the PATH: a symbolic link in $(BINDIR) to the built binary,
# so every later `make build` is what the link runs.
install: build link

link:
	@test -x $(MEMTRACE) || { echo "$(MEMTRACE) is not built: run make build"; exit 1; }
	@mkdir -p $(BINDIR)
	@ln -sfn $(MEMTRACE) $(BINDIR)/memtrace
	@echo "installed: $(BINDIR)/memtrace -> $(MEMTRACE)"
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; \
	  *) echo "$(BINDIR) is not on your PATH: add it, e.g. echo 'export PATH=\"$(BINDIR):\$$PATH\"' >> ~/.bashrc" ;; esac

# The demo needs the binary and one guest, the Cortex-M4 kernel suite (TFLM
# reference kernels from the tfmicro crate): no TFLM library, no CMSIS-NN, no
# unit tests. Everything else is built by `make build` and `make test`, or on
# first use of a command that needs it (the message says which make target).
demo-guests: deps
	$(MAKE) -C harness-c build/cortex-m4/suite.elf

demo: demo-guests
	$(CARGO) build --release --workspace
	@$(MAKE) --no-print-directory link
	@mkdir -p $(DEMO_OUT)
	$(MEMTRACE) run harness-c/build/cortex-m4/suite.elf \
	    --plot $(DEMO_OUT)/mobilenet-layers.png --events $(DEMO_OUT)/events.parquet
	@echo
	@echo "trace plot: $(DEMO_OUT)/mobilenet-layers.png, events: $(DEMO_OUT)/events.parquet"

oracle: deps
	@bash scripts/install-oracle.sh $(ORACLE_VENV)

# The Python wheel (python/dist/): the binary, the prebuilt guests and the
# Python API, for users without Rust or a cross compiler (docs/python.md).
wheel: build
	bash scripts/build-wheel.sh

# --no-fail-fast: every test binary runs, so one failure does not hide the
# others; cargo still exits non-zero when any test failed. Then the wheel,
# installed in a fresh venv without compilers, runs the Python API's tests.
test: cores-tested qemu-guests build oracle wheel
	MEMTRACE_TFLM_PYTHON=$(ORACLE_VENV)/bin/python \
	    $(CARGO) test --release --workspace --all-targets --no-fail-fast
	MEMTRACE_TFLM_PYTHON=$(ORACLE_VENV)/bin/python bash scripts/test-wheel.sh

bench: build
	$(MEMTRACE) bench

# The golden outputs of tests/cli/golden.rs written anew from this build,
# for review with `git diff fixtures/golden`.
# (The same cargo flags as `make test`, so nothing is compiled anew.)
golden: build
	MEMTRACE_BLESS=1 $(CARGO) test --release --workspace --all-targets -- golden::every_command

# The mutation campaign of `make test` (tests/fuzz_campaign.rs), scaled up and
# with a fresh seed per run; failing inputs land in fixtures/fuzz/ to commit.
# Coverage-guided fuzzing (cargo-fuzz / libFuzzer) needs a nightly Rust
# toolchain, which these machines do not have (docs/user-guide.md, "Fuzzing").
# FUZZ_TESTS selects campaigns by name (e.g. `make fuzz FUZZ_TESTS=programs`).
FUZZ_SCALE ?= 50
FUZZ_TESTS ?=
fuzz: build
	MEMTRACE_FUZZ_SCALE=$(FUZZ_SCALE) MEMTRACE_FUZZ_SEED=$${MEMTRACE_FUZZ_SEED:-$$(date +%s)} \
	    $(CARGO) test --release --test fuzz_campaign -- --nocapture $(FUZZ_TESTS)

# What every commit keeps clean: formatting, clippy, rustdoc links.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --release --no-deps --workspace --document-private-items

clean:
	$(MAKE) -C harness-c clean
	rm -rf $(DEMO_OUT) python/build python/dist
