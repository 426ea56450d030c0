# TorchNeuron build.  `make test` and `make demo` each do the whole set-up on a fresh machine.
# Parallelism is capped at 2 jobs (2-core, 24 GB machines; ATen translation units cost 1-2 GB each).

PY        ?= python3
VENV      := .venv
VPY       := $(VENV)/bin/python
CC        ?= cc
BUILD     := build
SAN_BUILD := build-san

CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -fPIC -pthread -Wall -Wextra -Wno-unused-parameter \
                 -Wno-missing-field-initializers -Icsrc/runtime -Icsrc/kernels -Icsrc/ccl -Icsrc/compiler
WERROR    ?= -Werror
CFLAGS    ?= -O2 -g
ISA_AVX512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c
ISA_AMX    := $(ISA_AVX512) -mamx-tile -mamx-bf16 -mamx-int8
# x86 CPUs without AVX-512 (AMD before Zen 4, most laptops): the *_avx2.c kernels
ISA_AVX2   := -mavx2 -mfma -mf16c

RT_SRC  := $(wildcard csrc/runtime/*.c)
NK_SRC  := $(wildcard csrc/kernels/*.c)
CCL_SRC := $(wildcard csrc/ccl/*.c)
NC_SRC  := $(wildcard csrc/compiler/*.c)
C_SRC   := $(RT_SRC) $(NK_SRC) $(CCL_SRC) $(NC_SRC)
C_HDR   := $(wildcard csrc/runtime/*.h csrc/kernels/*.h csrc/kernels/*.inc csrc/ccl/*.h)
NC_HDR  := $(wildcard csrc/compiler/*.h)
# the prelude of generated programs (nc_program.h with its local includes pasted in), embedded as a
# string in the compiler (nc_prelude()): an installed package needs no source tree to compile graphs
NC_PRELUDE := $(BUILD)/gen/nc_prelude.c
CTESTS  := $(patsubst tests/c/%.c,%,$(wildcard tests/c/test_*.c))

objs = $(patsubst csrc/%.c,$(1)/obj/%.o,$(C_SRC)) $(1)/obj/gen/nc_prelude.o

.PHONY: all venv hf-deps titan-deps titan build install clib ctest ctest-levels pytest-levels test test-sanitize test-tsan pytest demo bench bench-gemm clean conformance robustness fuzz profile models dist-upstream

all: install

# ---- C libraries (runtime + kernels + graph compiler): one static archive linked into the extension
# (which exports the compiler to torchneuron.compile) and the C tests
$(NC_PRELUDE): csrc/compiler/gen_prelude.py $(C_HDR) $(NC_HDR)
	$(PY) csrc/compiler/gen_prelude.py -o $@

define c_rules
$(1)/obj/%.o: csrc/%.c $(C_HDR)
	@mkdir -p $$(dir $$@)
	$(CC) $(CFLAGS_COMMON) $(WERROR) $(2) $$(if $$(findstring _avx512,$$<),$(ISA_AVX512))$$(if $$(findstring _amx,$$<),$(ISA_AMX))$$(if $$(findstring _avx2,$$<),$(ISA_AVX2)) -c $$< -o $$@
$(1)/obj/compiler/%.o: csrc/compiler/%.c $(C_HDR) $(NC_HDR)
	@mkdir -p $$(dir $$@)
	$(CC) $(CFLAGS_COMMON) $(WERROR) $(2) -c $$< -o $$@
$(1)/obj/gen/nc_prelude.o: $(NC_PRELUDE) $(NC_HDR)
	@mkdir -p $$(dir $$@)
	$(CC) $(CFLAGS_COMMON) $(WERROR) $(2) -c $$< -o $$@
$(1)/libneuron.a: $(call objs,$(1))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/tests/%: tests/c/%.c tests/c/ctest.h $(1)/libneuron.a
	@mkdir -p $$(dir $$@)
	$(CC) $(CFLAGS_COMMON) $(WERROR) $(2) -Itests/c $$< $(1)/libneuron.a -lm -ldl -o $$@
endef
$(eval $(call c_rules,$(BUILD),$(CFLAGS)))
TSAN_BUILD := build-tsan
$(eval $(call c_rules,$(TSAN_BUILD),-O1 -g -fsanitize=thread))
SANFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
$(eval $(call c_rules,$(SAN_BUILD),$(SANFLAGS)))

clib: $(BUILD)/libneuron.a

ctest: $(addprefix $(BUILD)/tests/,$(CTESTS))
	@set -e; for t in $^; do echo "== $$t"; ./$$t; done

# The C tests again at the forced kernel levels below the CPU's own (NEURON_KERNELS=avx2, portable):
# every level's kernels, not only the best one's, run in `make test` (a level the CPU lacks, or its own
# best, which ctest already ran, is skipped)
CTEST_LEVELS ?= avx2 portable
ctest-levels: $(addprefix $(BUILD)/tests/,$(CTESTS))
	@set -e; for l in $(CTEST_LEVELS); do \
	  if [ "$$l" = avx2 ] && ! grep -qw avx2 /proc/cpuinfo; then echo "== level $$l: not on this CPU, skipped"; continue; fi; \
	  if [ "$$l" = avx2 ] && ! grep -qw avx512f /proc/cpuinfo; then echo "== level $$l: this CPU's own level, run by ctest"; continue; fi; \
	  echo "== level $$l"; for t in $^; do NEURON_KERNELS=$$l ./$$t > $(BUILD)/tests/level-$$l.log 2>&1 || \
	  { cat $(BUILD)/tests/level-$$l.log; echo "FAILED at NEURON_KERNELS=$$l: $$t"; exit 1; }; tail -1 $(BUILD)/tests/level-$$l.log | sed "s|^|  $$(basename $$t): |"; done; done

test-sanitize: $(addprefix $(SAN_BUILD)/tests/,$(CTESTS))
	@set -e; for t in $^; do echo "== $$t (asan+ubsan)"; ASAN_OPTIONS=detect_leaks=1 ./$$t; done

# ThreadSanitizer over the runtime tests (queues, allocator, pool); not part of `make test`
test-tsan: $(TSAN_BUILD)/tests/test_runtime $(TSAN_BUILD)/tests/test_alloc
	@set -e; for t in $^; do echo "== $$t (tsan)"; ./$$t; done

# ---- Python environment and the extension
$(VENV)/.torch-installed:
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip setuptools wheel
	$(VPY) -m pip install --quiet torch==2.13.0
	$(VPY) -m pip install --quiet numpy pytest ninja expecttest
	@touch $@

venv: $(VENV)/.torch-installed

# Test-only: Hugging Face Transformers, Accelerate and PEFT (the compile sweep's tiny models,
# tests/python/hf_models.py; the ecosystem tests; the model sweep, `make models`).  Installed with
# --no-deps from tests/models/requirements.txt, where every requirement is pinned, so that no resolver run
# can replace the CPU torch with a CUDA build (transformers' torch extras and its neighbours require plain
# `torch`); the rule then fails unless torch is still 2.13.0+cpu.  A new pin there reinstalls.
HF_REQ   := tests/models/requirements.txt
HF_STAMP := $(VENV)/.hf-installed
$(HF_STAMP): $(VENV)/.torch-installed $(HF_REQ)
	$(VPY) -m pip install --quiet --no-deps -r $(HF_REQ)
	$(VPY) -m pip check
	$(VPY) -c "import torch, transformers, accelerate, peft; v = torch.__version__; \
	  assert v == '2.13.0+cpu', f'installing transformers changed torch to {v}: rm -r $(VENV) and rebuild'"
	@touch $@

hf-deps: $(HF_STAMP)

# TorchTitan 0.3.0 and its closure (tests/models/requirements-titan.txt, every version pinned) go into
# their own directory, put on PYTHONPATH only by the TorchTitan run (tests/models/titan.py): it needs
# huggingface-hub<2 beside the sweep's 2.4, and triton, which no other test should see.
TITAN_REQ   := tests/models/requirements-titan.txt
TITAN_SITE  := $(VENV)/titan-site
TITAN_STAMP := $(VENV)/.titan-installed
$(TITAN_STAMP): $(VENV)/.torch-installed $(TITAN_REQ)
	rm -rf $(TITAN_SITE)
	$(VPY) -m pip install --quiet --no-deps --target $(TITAN_SITE) -r $(TITAN_REQ)
	PYTHONPATH=$(TITAN_SITE) $(VPY) -c "import torch, torchtitan.train; v = torch.__version__; \
	  assert v == '2.13.0+cpu', f'installing torchtitan changed torch to {v}'"
	@touch $@

titan-deps: $(TITAN_STAMP)

# TorchTitan's llama3 debug model, FSDP2 on 2 ranks, neuron against the CPU (tests/models/titan.py)
titan: install $(TITAN_STAMP)
	$(VPY) -m tests.models.titan $(ARGS)

$(VENV)/.neuron-installed: $(VENV)/.torch-installed $(BUILD)/libneuron.a setup.py pyproject.toml \
		$(wildcard csrc/torch/*.cpp csrc/torch/*.h)
	MAX_JOBS=2 $(VPY) -m pip install --quiet --no-build-isolation --no-deps -e .
	@touch $@

install: $(VENV)/.neuron-installed
build: install

pytest: install $(HF_STAMP) $(TITAN_STAMP)
	$(VPY) -m pytest -q -x tests/python

# The Python tests of the AVX2 families' users (mm/linear shapes, SDPA, flash and flex attention, softmax rows, norms, gelu, the OpInfo smoke sweep, convolution,
# int_mm, training parity) again at NEURON_KERNELS=avx2, where the CPU has AVX2 (about 1 min)
PYTEST_LEVEL_FILES := test_gemm_shapes test_sdpa test_flash_attention test_flex_attention test_rows test_norm test_gelu test_conformance_smoke test_conv test_int_mm test_mm_empty_k test_training_parity
pytest-levels: install
	@if ! grep -qw avx2 /proc/cpuinfo; then echo "pytest-levels: no AVX2 on this CPU, skipped"; \
	elif ! grep -qw avx512f /proc/cpuinfo; then echo "pytest-levels: avx2 is this CPU's own level, which pytest ran"; \
	else NEURON_KERNELS=avx2 $(VPY) -m pytest -q -p no:warnings $(patsubst %,tests/python/%.py,$(PYTEST_LEVEL_FILES)); fi

test: ctest ctest-levels test-sanitize install $(HF_STAMP) $(TITAN_STAMP)
	$(VPY) -m pytest -q tests/python
	$(MAKE) --no-print-directory pytest-levels

# PyTorch's OpInfo database on neuron vs CPU (tests/conformance): writes docs/conformance.md
conformance: install
	$(VPY) -m tests.conformance

# PyTorch's own distributed test bases (_DistTestBase, FSDPTest, DTensorTestBase) on the backend neuron,
# 2 ranks: every test classified, counts into docs/distributed.md "Upstream test bases" (tests/distributed;
# a slice runs in make test: tests/python/test_distributed_upstream.py).  ARGS="--bases fsdp -k parity"
dist-upstream: install
	nice -n 5 $(VPY) -m tests.distributed $(ARGS)

# The whole bad-input catalogue (tests/robustness) on neuron vs CPU: writes docs/robustness.md
# (its fast subset runs in `make test` through tests/python/test_robustness.py)
# then the fuzzer (below) with seed 1 for ROBUSTNESS_FUZZ_SECONDS, its totals into the same page
ROBUSTNESS_FUZZ_SECONDS ?= 300
robustness: install
	$(VPY) -m tests.robustness
	$(VPY) -m tests.robustness.fuzz --seed 1 --budget $(ROBUSTNESS_FUZZ_SECONDS) --doc docs/robustness.md

# Fuzzing the op surface against the CPU (tests/robustness/fuzz.py): FUZZ_SECONDS of random cases
# (pointwise, reductions, indexing, shape ops, matmul) with run seed FUZZ_SEED (default: from the clock,
# printed); a finding prints its case seed: python -m tests.robustness.fuzz --replay SEED
FUZZ_SECONDS ?= 180
fuzz: install
	$(VPY) -m tests.robustness.fuzz --budget $(FUZZ_SECONDS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# The Hugging Face model sweep (tests/models): each architecture in its own process against the CPU (forward,
# training step, generate, compiled forward, fallback ops) -> docs/models.md and README's "Works with" table.
# CPU-heavy, so at low priority; ARGS="llama mixtral" runs only those (no report), ARGS=--resume continues.
models: install $(HF_STAMP)
	nice -n 10 $(VPY) -m tests.models $(ARGS)

demo: install
	$(VPY) examples/train_gpt.py --compare

bench: install
	$(VPY) -c "import matplotlib" 2>/dev/null || $(VPY) -m pip install -q matplotlib
	$(VPY) -m bench

# The GEMMs (f32, bf16, int8) at every kernel level this CPU has, against torch CPU, in one table (a few
# minutes; bench/gemm_levels.py)
bench-gemm: install
	$(VPY) -m bench.gemm_levels

# perf (or callgrind) profiles of every workload of the latest bench report where neuron is slower than the
# CPU -> docs/profiles.md (bench/profile.py; ARGS="--only NAME,..." or ARGS="--match REGEX" to choose)
profile: install
	$(VPY) -m bench.profile $(ARGS)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD) torchneuron/*.so *.egg-info
