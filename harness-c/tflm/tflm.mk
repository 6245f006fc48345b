# harness-c/tflm/tflm.mk — the TFLM runner guests (included by ../Makefile).
#
#   build/<target>/tflm-runner.elf        MicroInterpreter, TFLM reference kernels
#   build/<target>/tflm-runner-cmsis.elf  MicroInterpreter, TFLM's CMSIS-NN kernels
#
# TFLM itself is compiled once per (TFLM tree, kernel library, CMSIS-NN
# checkout, target, compiler, flags) into a static library kept OUTSIDE the
# repository, so fresh clones, `make test` and CI reuse it:
#
#   $(TFLM_CACHE)/<target>-<kernels>-<key>/libtflm.a
#
# <key> is a hash of all of those inputs (the file key.txt next to the library
# spells them out), the sources by content, not by path or timestamp: a tree
# copied or unpacked afresh (new mtimes, another path) reuses the library,
# while an edited TFLM or CMSIS-NN file, another compiler or flag set gives
# another directory. A directory whose libtflm.a exists is therefore never
# rebuilt; one without it is built object by object, and an object that is
# there is current by the same key (no dependency files: a cache entry is
# shared by clones at other paths), so an interrupted build resumes.
#
# Variables (see ../Makefile and ../README.md):
#   TFLM_TREE=/path          a standalone TFLM tree (create_tflm_tree.py output:
#                            tensorflow/, signal/, third_party/). Default: the
#                            repository's sibling ../shared/third_party/tflm.
#   TFLM_CMSIS_NN_DIR=/path  CMSIS-NN for tflm-runner-cmsis.elf. Default: the
#                            CMSIS-NN the TFLM tree pins
#                            ($(TFLM_TREE)/third_party/cmsis_nn), unless
#                            CMSIS_NN_DIR is set on the command line or in the
#                            environment, which then wins for every guest.
#   TFLM_CACHE=/path         where the compiled libraries go
#                            (default $(HOME)/.cache/memtrace-tflm)
#   TFLM_TREE_DEFS=...       preprocessor flags for TFLM (default
#                            -DTF_LITE_STATIC_MEMORY, as TFLM's own Makefile)

TFLM_TREE ?= $(abspath ../../shared/third_party/tflm)
TFLM_TREE_DEFS ?= -DTF_LITE_STATIC_MEMORY
TFLM_CACHE ?= $(if $(HOME),$(HOME)/.cache/memtrace-tflm,$(abspath $(BUILD))/tflm-cache)
TFLM_TREE_FOUND := $(if $(strip $(TFLM_TREE)),$(wildcard $(TFLM_TREE)/tensorflow/lite/micro/micro_interpreter.h))
# CMSIS_NN_USER is computed in ../Makefile before CMSIS_NN_DIR gets its default.
TFLM_CMSIS_NN_DIR ?= $(if $(CMSIS_NN_USER),$(CMSIS_NN_DIR),$(TFLM_TREE)/third_party/cmsis_nn)
TFLM_CMSIS_NN_FOUND := $(if $(strip $(TFLM_CMSIS_NN_DIR)),$(wildcard $(TFLM_CMSIS_NN_DIR)/Include/arm_nnfunctions.h))

# x86-64: TFLM's float kernels call libm (expf, tanhf, logf, ...). glibc's
# libm is IFUNC-resolved at load time, which never happens in a freestanding
# run, so the x86-64 runner takes libm (and the few string routines
# rt/libc_shims.c lacks) from musl's static libc.a, which has no IFUNCs
# (Debian: apt-get install musl-dev). Only the archive members TFLM refers to
# are linked; musl's start-up code (crt1.o, __libc_start_main) is not, the
# runner starts in rt/x86_64/start.S like every guest.
MUSL_LIBC ?= /usr/lib/x86_64-linux-musl/libc.a
MUSL_FOUND := $(if $(strip $(MUSL_LIBC)),$(wildcard $(MUSL_LIBC)))

# Targets the runner is built for (x86-64 only with musl's libc.a).
TFLM_TARGETS := cortex-m4 $(if $(MUSL_FOUND),x86_64) $(ALL_CORES)

# The flags TFLM is compiled with: the repository's code generation flags,
# C++17 (TFLM needs it), no exceptions / RTTI / thread-safe statics /
# atexit registration (nothing ever runs after main), warnings off (not our
# code). Part of the cache key.
TFLM_CODEGEN := -O2 -g -ffunction-sections -fdata-sections -fno-common \
    -fno-stack-protector -fno-asynchronous-unwind-tables -fno-unwind-tables \
    -ffp-contract=$(FP_CONTRACT)
TFLM_LIB_CXXFLAGS := -std=c++17 -fno-exceptions -fno-rtti -fno-threadsafe-statics \
    -fno-use-cxa-atexit $(TFLM_CODEGEN) -w
TFLM_LIB_CFLAGS := -std=gnu11 $(TFLM_CODEGEN) -w
TFLM_TREE_INCLUDES = -I$(TFLM_TREE) -I$(TFLM_TREE)/third_party/flatbuffers/include \
    -I$(TFLM_TREE)/third_party/gemmlowp -I$(TFLM_TREE)/third_party/ruy \
    -I$(TFLM_TREE)/third_party/kissfft
TFLM_CMSIS_INCLUDES = -I$(TFLM_CMSIS_NN_DIR) -I$(TFLM_CMSIS_NN_DIR)/Include \
    -I$(TFLM_TREE)/third_party/cmsis/CMSIS/Core/Include

ifneq ($(TFLM_TREE_FOUND),)

# Every .cc of the tree, except the Cortex-M platform files (the runner
# provides DebugLog / DebugVsnprintf / GetCurrentTimeTicks itself;
# cortex_m_generic/micro_time.cc needs a device header). kissfft's .c files
# are #included by signal/src/kiss_fft_wrappers/*.cc, not compiled alone.
TFLM_ALL_CC := $(shell cd $(TFLM_TREE) && find tensorflow signal -name '*.cc' | LC_ALL=C sort)
TFLM_GLUE_CC := $(filter tensorflow/lite/micro/kernels/cmsis_nn/%,$(TFLM_ALL_CC))
TFLM_COMMON_CC := $(filter-out tensorflow/lite/micro/cortex_m_generic/% $(TFLM_GLUE_CC),$(TFLM_ALL_CC))
TFLM_SRCS.reference := $(TFLM_COMMON_CC)
# CMSIS-NN build: kernels/cmsis_nn/X.cc replaces kernels/X.cc.
TFLM_SRCS.cmsis_nn := $(filter-out $(subst /cmsis_nn/,/,$(TFLM_GLUE_CC)),$(TFLM_COMMON_CC)) $(TFLM_GLUE_CC)
TFLM_CSRCS.reference :=
TFLM_CSRCS.cmsis_nn := $(if $(TFLM_CMSIS_NN_FOUND),$(shell cd $(TFLM_CMSIS_NN_DIR) && find Source -name '*.c' | LC_ALL=C sort))
TFLM_DEFS.reference :=
TFLM_DEFS.cmsis_nn := -DCMSIS_NN
TFLM_INC.reference :=
TFLM_INC.cmsis_nn = $(TFLM_CMSIS_INCLUDES)
TFLM_ELF.reference := tflm-runner.elf
TFLM_ELF.cmsis_nn := tflm-runner-cmsis.elf
TFLM_KERNEL_LIBS := reference $(if $(TFLM_CMSIS_NN_FOUND),cmsis_nn)
TFLM_NOTE := $(if $(TFLM_CMSIS_NN_FOUND),,tflm-cmsis-note)

# The runner's own sources, compiled per kernel library (TFLM's kernel
# headers declare other registrations with -DCMSIS_NN).
TFLM_RUNNER := tflm/runner tflm/platform tflm/storage_ops tflm/red_zones

# The operators a runner registers: `all` (every Add* of
# MicroMutableOpResolver: any model runs), or operators by their Add* name
# without `Add` or as a model names them, e.g. TFLM_OPS="Conv2D RESHAPE". A runner of some operators is linked
# against a library of just their kernels (tflm/op-sources.sh lists them),
# a quarter of TFLM to compile. TFLM_TEST_OPS are the operators of the model
# the per-core tests of `make test` run (MLPerf Tiny's DS-CNN): `cores-tested`
# builds those runners with them, unless a runner of all operators is there
# already (one is never narrowed; `make cores` widens it). The ELF's
# `memtrace_runner_ops` names the operators of a narrowed runner.
TFLM_OPS ?= all
ATOMIC := sh tflm/atomic.sh
FORCE:
TFLM_TEST_OPS := AveragePool2D Conv2D DepthwiseConv2D FullyConnected Reshape Softmax

# A digest of every C/C++ source and header under a directory (0.1 s for the
# whole TFLM tree).
source_digest = $(shell cd $(1) && find . -type f \( -name '*.cc' -o -name '*.c' -o -name '*.h' \) -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
TFLM_TREE_DIGEST := $(call source_digest,$(TFLM_TREE))
TFLM_CMSIS_NN_DIGEST := $(if $(TFLM_CMSIS_NN_FOUND),$(call source_digest,$(TFLM_CMSIS_NN_DIR)))

# Operators may be named as a model names them (CONV_2D, a custom code) or by
# their Add* name: each is turned into its Add* name.
ifeq ($(TFLM_OPS),all)
TFLM_OPS_SORTED := all
else
TFLM_OPS_SORTED := $(shell sh tflm/op-sources.sh --names '$(TFLM_TREE)' $(TFLM_OPS))
$(if $(filter 0,$(.SHELLSTATUS)),,$(error TFLM_OPS="$(TFLM_OPS)": $(TFLM_TREE) cannot build a runner of these operators (the message above names the one TFLM lacks)))
endif
TFLM_OPS_KEY := $(shell printf '%s' '$(TFLM_OPS_SORTED)' | sha256sum | cut -c1-12)
TFLM_OPS_MACRO := -D'MTFLM_OPS_SUBSET(X)=$(foreach o,$(TFLM_OPS_SORTED),X(Add$(o)))'
ifneq ($(TFLM_OPS),all)
# $(1) = kernel library: the TFLM sources of the runner of TFLM_OPS.
define tflm_subset_sources
TFLM_SUBSET_SRCS.$(1) := $$(shell sh tflm/op-sources.sh '$(TFLM_TREE)' $(1) $(TFLM_OPS_SORTED))
$$(if $$(filter 0,$$(.SHELLSTATUS)),,$$(error TFLM_OPS="$(TFLM_OPS)": tflm/op-sources.sh failed for the $(1) kernels (the message above names the operator)))
# The archive is named by what it holds.
TFLM_SUBSET_KEY.$(1) := $$(shell printf '%s' '$$(TFLM_SUBSET_SRCS.$(1))' | sha256sum | cut -c1-12)
endef
$(foreach k,$(TFLM_KERNEL_LIBS),$(eval $(call tflm_subset_sources,$(k))))
endif

# $(1) = target, $(2) = kernel library (reference | cmsis_nn)
define tflm_lib_rules
TFLM_KEYTEXT.$(1).$(2) := tree=$(TFLM_TREE_DIGEST) kernels=$(2) \
    cmsis_nn=$(if $(filter cmsis_nn,$(2)),$(TFLM_CMSIS_NN_DIGEST)) target=$(1) \
    cxx=$(shell command -v $(CXX.$(1))) cc=$(shell command -v $(CC.$(1))) \
    version=$(shell $(CXX.$(1)) -dumpfullversion -dumpmachine 2>/dev/null | tr '\n' ' ') \
    arch=$(ARCH.$(1)) cxxflags=$(TFLM_LIB_CXXFLAGS) cflags=$(TFLM_LIB_CFLAGS) defs=$(TFLM_TREE_DEFS) $(TFLM_DEFS.$(2))
TFLM_LIBDIR.$(1).$(2) := $(TFLM_CACHE)/$(1)-$(2)-$$(shell printf '%s' '$$(TFLM_KEYTEXT.$(1).$(2))' | sha256sum | cut -c1-16)
TFLM_OBJS.$(1).$(2) := $$(addprefix $$(TFLM_LIBDIR.$(1).$(2))/obj/,$$(TFLM_SRCS.$(2):.cc=.o)) \
    $$(addprefix $$(TFLM_LIBDIR.$(1).$(2))/cmsis-nn/,$$(TFLM_CSRCS.$(2):.c=.o))

# Objects and archives are written whole (tflm/atomic.sh): builds sharing
# the cache never read each other's half-written files.
$$(TFLM_LIBDIR.$(1).$(2))/obj/%.o: $(TFLM_TREE)/%.cc | check-$(1)
	@mkdir -p $$(@D)
	$(ATOMIC) cc $$@ $(CXX.$(1)) $(ARCH.$(1)) $(TFLM_LIB_CXXFLAGS) $$(TFLM_TREE_DEFS) $(TFLM_DEFS.$(2)) \
	    $$(TFLM_TREE_INCLUDES) $(TFLM_INC.$(2)) -c $$<

$$(TFLM_LIBDIR.$(1).$(2))/cmsis-nn/%.o: $(TFLM_CMSIS_NN_DIR)/%.c | check-$(1)
	@mkdir -p $$(@D)
	$(ATOMIC) cc $$@ $(CC.$(1)) $(ARCH.$(1)) $(TFLM_LIB_CFLAGS) $(TFLM_INC.$(2)) -c $$<

# An existing archive is current by its key.
$$(TFLM_LIBDIR.$(1).$(2))/libtflm.a: $$(if $$(wildcard $$(TFLM_LIBDIR.$(1).$(2))/libtflm.a),,$$(filter-out \
    $$(wildcard $$(TFLM_OBJS.$(1).$(2))),$$(TFLM_OBJS.$(1).$(2))))
	@printf '%s\n' '$$(TFLM_KEYTEXT.$(1).$(2))' > $$(@D)/key.txt
	@echo "$(AR.$(1)) rcs $$@ <$$(words $$(TFLM_OBJS.$(1).$(2))) objects>"
	@$(ATOMIC) ar $$@ $(AR.$(1)) $$(TFLM_OBJS.$(1).$(2))

# The operators of this runner: TFLM_OPS, unless a runner of all is built
# (its stamp says so, or it predates stamps).
TFLM_STAMP.$(1).$(2) := $(BUILD)/$(1)/$(TFLM_ELF.$(2):.elf=.ops)
TFLM_OPS.$(1).$(2) := $$(if $$(or $$(filter all,$(TFLM_OPS) $$(file <$$(TFLM_STAMP.$(1).$(2)))),$$(and \
    $$(wildcard $(BUILD)/$(1)/$(TFLM_ELF.$(2))),$$(if $$(wildcard $$(TFLM_STAMP.$(1).$(2))),,old))),all,$(TFLM_OPS_SORTED))
ifeq ($$(TFLM_OPS.$(1).$(2)),all)
TFLM_ARCHIVE.$(1).$(2) := $$(TFLM_LIBDIR.$(1).$(2))/libtflm.a
TFLM_OPS_OBJ.$(1).$(2) := $(BUILD)/$(1)/obj/tflm/ops-$(2).o
TFLM_OPS_LDFLAGS.$(1).$(2) :=
else
TFLM_ARCHIVE.$(1).$(2) := $$(TFLM_LIBDIR.$(1).$(2))/libtflm-ops-$$(TFLM_SUBSET_KEY.$(2)).a
TFLM_OPS_OBJ.$(1).$(2) := $(BUILD)/$(1)/obj/tflm/ops-$(2)-$(TFLM_OPS_KEY).o
TFLM_OPS_LDFLAGS.$(1).$(2) := -Wl,--undefined=memtrace_runner_ops
TFLM_SUBSET_OBJS.$(1).$(2) := $$(addprefix $$(TFLM_LIBDIR.$(1).$(2))/obj/,$$(TFLM_SUBSET_SRCS.$(2):.cc=.o)) \
    $$(addprefix $$(TFLM_LIBDIR.$(1).$(2))/cmsis-nn/,$$(TFLM_CSRCS.$(2):.c=.o))
# Objects already in the cache are current by its key.
$$(TFLM_ARCHIVE.$(1).$(2)): $$(filter-out $$(wildcard $$(TFLM_SUBSET_OBJS.$(1).$(2))),$$(TFLM_SUBSET_OBJS.$(1).$(2)))
	@printf '%s\n' '$$(TFLM_KEYTEXT.$(1).$(2))' > $$(@D)/key.txt
	@echo "$(AR.$(1)) rcs $$@ <$$(words $$(TFLM_SUBSET_OBJS.$(1).$(2))) objects: $(TFLM_OPS_SORTED)>"
	@$(ATOMIC) ar $$@ $(AR.$(1)) $$(TFLM_SUBSET_OBJS.$(1).$(2))

$(BUILD)/$(1)/obj/tflm/ops-$(2)-$(TFLM_OPS_KEY).o: tflm/ops.cc | check-$(1)
	@mkdir -p $$(@D)
	$(CXX.$(1)) $(ARCH.$(1)) $$(TFLM_RUNNER_CXXFLAGS) $$(TFLM_TREE_DEFS) $(TFLM_DEFS.$(2)) \
	    $(TFLM_OPS_MACRO) -c $$< -o $$@
endif

# Rewritten only when the operators change, so the runner relinks then.
$$(TFLM_STAMP.$(1).$(2)): FORCE
	@mkdir -p $$(@D)
	@if [ "$$$$(cat $$@ 2>/dev/null)" != '$$(TFLM_OPS.$(1).$(2))' ]; then \
	    printf '%s\n' '$$(TFLM_OPS.$(1).$(2))' > $$@; fi

TFLM_RUNNER_OBJS.$(1).$(2) := $$(addprefix $(BUILD)/$(1)/obj/,$$(addsuffix -$(2).o,$(TFLM_RUNNER))) \
    $$(TFLM_OPS_OBJ.$(1).$(2))

$(BUILD)/$(1)/obj/tflm/%-$(2).o: tflm/%.cc | check-$(1)
	@mkdir -p $$(@D)
	$(CXX.$(1)) $(ARCH.$(1)) $$(TFLM_RUNNER_CXXFLAGS) $$(TFLM_TREE_DEFS) $(TFLM_DEFS.$(2)) \
	    -c $$< -o $$@

$(BUILD)/$(1)/$(TFLM_ELF.$(2)): $$(addprefix $(BUILD)/$(1)/obj/rt/,$$(addsuffix .o,$(RT_PORT))) \
    $$(TFLM_RUNNER_OBJS.$(1).$(2)) $$(TFLM_ARCHIVE.$(1).$(2)) $(TFLM_LDSCRIPT.$(1)) $$(TFLM_STAMP.$(1).$(2))
	$(CXX.$(1)) $(ARCH.$(1)) $(LDFLAGS_ALL) $(LINK.$(1)) -T $(TFLM_LDSCRIPT.$(1)) $$(TFLM_OPS_LDFLAGS.$(1).$(2)) \
	    -Wl,-Map=$$(@:.elf=.map) -o $$@.tmp $$(filter %.o %.a,$$^) $(TFLM_LDLIBS.$(1))
	@# Renamed into place: memtrace may be reading the runner it widens.
	@mv -f $$@.tmp $$@
	$(TFLM_CHECK.$(1))

# The probe runner: the same runner with memtrace's own test kernels
# (tflm/probe_ops.cc) registered too, for the tests of memtrace itself.
$(BUILD)/$(1)/$(TFLM_ELF.$(2):.elf=-probe.elf): $(BUILD)/$(1)/obj/tflm/probe_ops-$(2).o \
    $(BUILD)/$(1)/$(TFLM_ELF.$(2))
	$(CXX.$(1)) $(ARCH.$(1)) $(LDFLAGS_ALL) $(LINK.$(1)) -T $(TFLM_LDSCRIPT.$(1)) $$(TFLM_OPS_LDFLAGS.$(1).$(2)) \
	    -Wl,-Map=$$(@:.elf=.map) -o $$@.tmp $$(addprefix $(BUILD)/$(1)/obj/rt/,$$(addsuffix .o,$(RT_PORT))) \
	    $$(TFLM_RUNNER_OBJS.$(1).$(2)) $$< $$(TFLM_ARCHIVE.$(1).$(2)) $(TFLM_LDLIBS.$(1))
	@mv -f $$@.tmp $$@
	$(TFLM_CHECK.$(1))

$(1): $(BUILD)/$(1)/$(TFLM_ELF.$(2)) $(BUILD)/$(1)/$(TFLM_ELF.$(2):.elf=-probe.elf)
endef

# The runner's own code: C++17 like TFLM, the repository's warnings, TFLM's
# headers as system headers (their warnings are not ours). -MD, not -MMD:
# system headers must stay in the dependency files.
TFLM_RUNNER_CXXFLAGS = -std=c++17 -fno-exceptions -fno-rtti -fno-threadsafe-statics \
    -fno-use-cxa-atexit $(TFLM_CODEGEN) -Wall -Wextra -I. -Iinclude -Irt -MD -MP \
    $(subst -I,-isystem ,$(TFLM_TREE_INCLUDES))

TFLM_LDSCRIPT.cortex-m4 := rt/cortex-m4/memtrace-tflm.ld
# newlib's libm for TFLM's float kernels, its libc for the few string
# routines rt/libc_shims.c does not define (strcmp, ...); nothing that needs a
# system call is pulled in (the link fails if something is).
TFLM_LDLIBS.cortex-m4 := -lm -lc -lgcc
TFLM_CHECK.cortex-m4 :=
# The other Cortex-M cores link the same way (newlib's multilib for the core).
$(foreach c,$(ALL_CORES),$(eval TFLM_LDSCRIPT.$(c) := $(TFLM_LDSCRIPT.cortex-m4)) \
    $(eval TFLM_LDLIBS.$(c) := $(TFLM_LDLIBS.cortex-m4))$(eval TFLM_CHECK.$(c) :=))

TFLM_LDSCRIPT.x86_64 := rt/x86_64/memtrace-tflm.ld
# musl's libc.a by its path (not -lc: that would be glibc's), then libgcc.
TFLM_LDLIBS.x86_64 := -Wl,--start-group $(MUSL_LIBC) -lgcc -Wl,--end-group
# musl makes system calls with an inline `syscall` instruction and reaches
# errno and thread data through %fs (the thread pointer): a link that pulled
# in either would fail only at run time, in the middle of a model. The one
# %fs access allowed is the stack canary at %fs:0x28 (Debian's musl is built
# with -fstack-protector-strong), which tflm/platform.cc provides; anything
# else refuses the ELF now (the map names the musl members taken).
TFLM_CHECK.x86_64 = @bad=`objdump -d --no-show-raw-insn $$@ | awk '/^[0-9a-f]+ </ { fn = $$$$2 } \
	    /(^|[[:space:]])syscall([[:space:]]|$$$$)|%fs:/ && !/%fs:0x28,/ { print fn, $$$$0 }'`; \
	if [ -n "$$$$bad" ]; then echo "$$$$bad" | head -n 10 >&2; \
	    echo "error: $$@ makes system calls or uses the thread pointer beyond the stack canary (musl members: see $$(@:.elf=.map))" >&2; \
	    rm -f $$@; exit 1; fi

# picolibc's libm and libc for RISC-V, as newlib's on the Cortex-M (its
# release build: the one compiled for speed). Its errno is thread-local:
# rt/riscv32/start.S points tp at the linker script's TLS block.
PICOLIBC_LIB := $(PICOLIBC)/lib/release/rv32imac/ilp32
TFLM_LDSCRIPT.riscv32 := rt/riscv32/memtrace-tflm.ld
TFLM_LDLIBS.riscv32 := -L$(PICOLIBC_LIB) -lm -lc -lgcc
TFLM_CHECK.riscv32 :=

$(foreach t,$(TFLM_TARGETS),$(foreach k,$(TFLM_KERNEL_LIBS),$(eval $(call tflm_lib_rules,$(t),$(k)))))
$(foreach t,$(RISCV),$(eval $(call tflm_lib_rules,$(t),reference)))
$(foreach t,$(TFLM_TARGETS),$(eval $(t): $(TFLM_NOTE)))
$(if $(MUSL_FOUND),,$(eval x86_64: tflm-musl-note))

# The firmware `main` of docs/deploy.md (examples/deploy_main.cc) for the
# Cortex-M4, from the header `memtrace plan|verify --emit-offline OUT.tflite`
# writes beside OUT.tflite: TFLM's cached library of the kernels asked, the
# runner's TFLM platform file (DebugLog keeps TFLM's last message for the
# exit reason), the run-time library and linker script of `make rt`.
#
#   make -C harness-c deploy-example HEADER=/abs/OUT.h [DEPLOY_KERNELS=cmsis-nn]
#        [EXPECTED=/abs/expected.h] [DEPLOY_ELF=/abs/firmware.elf] [DEPLOY_DEFS=-D...]
#
# EXPECTED: a header with kInput/kInputSize and kExpectedOutput/
# kExpectedOutputSize (the exit code then says whether the outputs equal
# them). DEPLOY_DEFS: e.g. -DDEPLOY_ARENA_BYTES=N for another arena.
DEPLOY_KERNELS ?= reference
# memtrace's --kernels names (tflm, cmsis-nn) or the libraries' (reference,
# cmsis_nn): the same two builds.
DEPLOY_LIB := $(or $(filter reference cmsis_nn,$(patsubst tflm,reference,$(patsubst cmsis-nn,cmsis_nn,$(DEPLOY_KERNELS)))),$(error DEPLOY_KERNELS=$(DEPLOY_KERNELS): give tflm or cmsis-nn (memtrace's --kernels names)))
DEPLOY_ELF ?= $(BUILD)/cortex-m4/deploy-example.elf
DEPLOY_CXXFLAGS := -std=c++17 -O2 -g -fno-exceptions -fno-rtti -fno-threadsafe-statics \
    -fno-use-cxa-atexit -ffunction-sections -fdata-sections
.PHONY: deploy-example
deploy-example: $(BUILD)/cortex-m4/libmemtrace_rt.a $(BUILD)/cortex-m4/memtrace.ld \
    $(BUILD)/cortex-m4/obj/tflm/platform-$(DEPLOY_LIB).o \
    $(TFLM_LIBDIR.cortex-m4.$(DEPLOY_LIB))/libtflm.a | check-cortex-m4
	@test -f "$(HEADER)" || { echo "error: HEADER=$(HEADER): give the absolute path of the OUT.h that --emit-offline wrote" >&2; exit 1; }
	@mkdir -p $(dir $(DEPLOY_ELF))
	$(CXX.cortex-m4) $(ARCH.cortex-m4) $(DEPLOY_CXXFLAGS) $(TFLM_TREE_DEFS) $(TFLM_DEFS.$(DEPLOY_LIB)) \
	    -Iinclude $(TFLM_TREE_INCLUDES) -DMODEL_HEADER='"$(abspath $(HEADER))"' \
	    $(if $(EXPECTED),-DEXPECTED_HEADER='"$(abspath $(EXPECTED))"') $(DEPLOY_DEFS) \
	    -c examples/deploy_main.cc -o $(DEPLOY_ELF:.elf=.o)
	$(CXX.cortex-m4) $(ARCH.cortex-m4) -nostdlib -static -Wl,--gc-sections -L$(BUILD)/cortex-m4 \
	    -T memtrace.ld $(DEPLOY_ELF:.elf=.o) $(BUILD)/cortex-m4/obj/tflm/platform-$(DEPLOY_LIB).o \
	    $(TFLM_LIBDIR.cortex-m4.$(DEPLOY_LIB))/libtflm.a -lmemtrace_rt -lm -lc -lgcc -o $(DEPLOY_ELF)

else
$(foreach t,$(TFLM_TARGETS) $(RISCV),$(eval $(t): tflm-note))
deploy-example: tflm-note
endif

.PHONY: tflm-note tflm-cmsis-note tflm-musl-note print-tflm-tree
# Not errors: everything else builds.
tflm-note:
	@echo "memtrace: TFLM tree not found at $(or $(TFLM_TREE),<empty TFLM_TREE>); set TFLM_TREE=/path/to/tflm-tree to build tflm-runner.elf and tflm-runner-cmsis.elf"
tflm-cmsis-note:
	@echo "memtrace: CMSIS-NN for the TFLM runner not found at $(or $(TFLM_CMSIS_NN_DIR),<empty TFLM_CMSIS_NN_DIR>); set TFLM_CMSIS_NN_DIR=/path/to/CMSIS-NN to build tflm-runner-cmsis.elf"

tflm-musl-note:
	@echo "memtrace: musl's libc.a not found at $(or $(MUSL_LIBC),<empty MUSL_LIBC>); apt-get install musl-dev (or set MUSL_LIBC=/path/to/musl/libc.a) to build the x86-64 tflm-runner.elf and tflm-runner-cmsis.elf"

print-tflm-tree:
	@echo "TFLM_TREE=$(TFLM_TREE) ($(if $(TFLM_TREE_FOUND),found,not found))"
	@echo "TFLM_CMSIS_NN_DIR=$(TFLM_CMSIS_NN_DIR) ($(if $(TFLM_CMSIS_NN_FOUND),found,not found))"
	@echo "TFLM_CACHE=$(TFLM_CACHE)"
	@echo "MUSL_LIBC=$(MUSL_LIBC) ($(if $(MUSL_FOUND),found,not found: no x86-64 runner))"
	@$(foreach t,$(TFLM_TARGETS),$(foreach k,$(TFLM_KERNEL_LIBS),echo "$(t) $(k): $(TFLM_LIBDIR.$(t).$(k))/libtflm.a";))
