# stitch — build
#   make deps       install the Debian packages the build needs (apt-get when root; else the line to run)
#   make            build/libstitch.a, build/libstitch.so, build/stitch, build/stitch.so (installs nothing:
#                   a missing package is an error naming it)
#   make test       the whole suite (runs make deps first); last line "N passed, N failed"
#   make demo       the main job: train the Fashion-MNIST MLP (runs make deps first; ARGS="--epochs 1")
#   make install    PREFIX=/usr/local (DESTDIR too): header, libraries, the stitch executable, the Lua
#                   module where lua5.4 looks (PREFIX/lib/lua/5.4) and stitch.pc for pkg-config
#   make check-layers  no dependency runs from a lower layer to a higher one (part of make test)
#   make docs       regenerate docs/ops.md from trace/ops.def (make test checks that it is current)
#   make test-nvrtc every generated CUDA kernel compiled by NVRTC for sm_80 and sm_90a (no GPU needed)
#   make test-gpu   the suite on a CUDA GPU (docs/cuda.md)
#   make fuzz N=... the differential fuzzer, longer
#   make bench      benchmarks (bench/NOTES.md)
# Options: WERROR=1 (warnings are errors), SANITIZE=address,undefined, DEBUG=1, PORTABLE=1 (static
# libedit: a build/ that runs on the GPU machine, docs/cuda.md).

CC      ?= cc
BUILD   ?= build
WARN    := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Werror=implicit-function-declaration
OPT     := -O2 -g
ifeq ($(DEBUG),1)
OPT     := -O0 -g -DLUA_USE_APICHECK
endif
ifeq ($(WERROR),1)
WARN    += -Werror
endif
ifneq ($(SANITIZE),)
OPT     += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=$(SANITIZE)
BUILD   := build/san
endif
# FUZZ=1: clang with AddressSanitizer, UBSan and libFuzzer's coverage, in build/fuzz (tests/fuzz).
ifeq ($(FUZZ),1)
CC      := clang
OPT     := -O1 -g -fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer \
           -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=address,undefined
BUILD   := build/fuzz
endif
LUA_INC := /usr/include/lua5.4
LUA_A   := /usr/lib/x86_64-linux-gnu/liblua5.4.a
CPPFLAGS:= -D_GNU_SOURCE -Iinclude -I. -I$(LUA_INC) -MMD -MP
CFLAGS  := $(WARN) $(OPT) -fPIC -fvisibility=hidden -pthread
LDLIBS  := -lz -lm -ldl -pthread
EDITLIB := -ledit
# PORTABLE=1: link line editing statically too, so that build/stitch runs on a machine without
# Debian's libedit (the GPU machine: docs/cuda.md). libc, libm, libdl and zlib stay dynamic.
ifeq ($(PORTABLE),1)
EDITLIB := -Wl,-Bstatic -ledit -ltinfo -lbsd -lmd -Wl,-Bdynamic
endif

CORE_SRC := $(wildcard base/*.c device/*.c trace/*.c ir/*.c jit/*.c fuser/*.c runtime/*.c io/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/prelude_src.o
LUA_SRC  := $(filter-out lua_frontend/main.c,$(wildcard lua_frontend/*.c))
LUA_LIB  := $(sort $(wildcard lua_frontend/lib/*.lua))
LUA_OBJ  := $(LUA_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/gen/lualib.o
MAIN_OBJ := $(BUILD)/obj/lua_frontend/main.o
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

DEB_PKGS := build-essential liblua5.4-dev uthash-dev libedit-dev lua5.4 zlib1g-dev

.PHONY: fuzz-bins fuzz-files all deps check-deps test test-c test-lua test-nvrtc test-gpu test-sim sim sim-mutations check-layers docs install module install-module fuzz demo bench clean
all: $(BUILD)/libstitch.a $(BUILD)/libstitch.so $(BUILD)/stitch $(BUILD)/stitch.so $(BUILD)/tools/gen_ops

# The packages the build needs that are missing, as a list of Debian package names.
MISSING = $(strip $(if $(wildcard $(LUA_INC)/lua.h),,liblua5.4-dev) $(if $(wildcard $(LUA_A)),,liblua5.4-dev) \
    $(if $(wildcard /usr/include/uthash.h),,uthash-dev) $(if $(wildcard /usr/include/histedit.h),,libedit-dev) \
    $(if $(wildcard /usr/include/zlib.h),,zlib1g-dev) $(if $(shell command -v lua5.4),,lua5.4))

# Install the missing Debian packages (as root); otherwise print the apt-get line to run.
deps:
	@missing="$(sort $(MISSING))"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: $$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null || exit 1; \
	  else echo "missing packages; run: sudo apt-get install -y $$missing"; exit 1; fi; \
	fi

# A plain build installs nothing: it stops with the packages to install.
check-deps:
	@missing="$(sort $(MISSING))"; \
	if [ -n "$$missing" ]; then echo "missing Debian packages: $$missing (run: make deps)"; exit 1; fi

$(BUILD)/obj/%.o: %.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The JIT kernels' math flags (jit/compile.c), for the library's copies of prelude loops: sqrt
# vectorizes only when it need not set errno, and exp's loops on AVX2 only when a float operation
# may run on lanes that had skipped it; no result changes.
KERNEL_MATH := -fno-math-errno -fno-trapping-math
# The interpreter's AVX-512 and AVX2 copies of the elementwise loops (trace/interp_ew.h).
$(BUILD)/obj/trace/interp_ew.o $(BUILD)/obj/trace/interp_ew_avx2.o: CFLAGS += $(KERNEL_MATH)
# The library's AVX2 and AVX-512 copies of the GEMM (base/gemm.h) at the JIT's -O3: GCC's -O2 leaves
# most of the micro-kernel scalar (27 vs 69 GFLOP/s, AVX2); the attention task's exp needs the above.
$(BUILD)/obj/base/gemm_avx2.o $(BUILD)/obj/base/gemm_avx512.o: CFLAGS += -O3 $(KERNEL_MATH)

# The prelude is compiled into the runtime (interpreter) and embedded as text for the JIT: its two
# files joined (base/opmath.h includes base/opmath_gemm.h and base/opmath_attn.h unless
# ST_PRELUDE_JOINED says so).
PRELUDE := base/opmath.h base/opmath_gemm.h base/opmath_attn.h
$(BUILD)/gen/prelude.h: $(PRELUDE)
	@mkdir -p $(dir $@)
	{ echo '#define ST_PRELUDE_JOINED'; cat $(PRELUDE); } > $@
$(BUILD)/gen/prelude_src.c: $(BUILD)/gen/prelude.h tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh st_prelude_src $< > $@
$(BUILD)/obj/gen/prelude_src.o: $(BUILD)/gen/prelude_src.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The Lua training library (lua_frontend/lib/*.lua) is embedded into the module and the executable.
$(BUILD)/gen/lualib.c: $(LUA_LIB) tools/embed_lua.sh lua_frontend/lib
	@mkdir -p $(dir $@)
	sh tools/embed_lua.sh $(LUA_LIB) > $@
$(BUILD)/obj/gen/lualib.o: $(BUILD)/gen/lualib.c | check-deps
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libstitch.a: $(CORE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libstitch.so: $(CORE_OBJ)
	$(CC) -shared $(LDSAN) -o $@ $^ $(LDLIBS)

# The executable: Lua linked statically, line editing from libedit.
$(BUILD)/stitch: $(MAIN_OBJ) $(LUA_OBJ) $(BUILD)/libstitch.a
	$(CC) $(LDSAN) -rdynamic -o $@ $(MAIN_OBJ) $(LUA_OBJ) $(BUILD)/libstitch.a $(LUA_A) $(EDITLIB) $(LDLIBS)

# The Lua C module for a stock lua5.4 (Lua symbols come from the host interpreter).
$(BUILD)/stitch.so: $(LUA_OBJ) $(BUILD)/libstitch.a
	$(CC) -shared $(LDSAN) -o $@ $(LUA_OBJ) $(BUILD)/libstitch.a $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libstitch.a $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libstitch.a $(LDSAN) $(LDLIBS)
# test_api_null checks that it calls every function the shared library exports (nm -D).
$(BUILD)/tests/test_api_null: $(BUILD)/libstitch.so

# Under SANITIZE the differential fuzzer runs the first 1000 of its 2000 graphs (the plain pass runs
# them all; the sanitized pass is after memory errors, and its 2000 took ~9 minutes of CI's 90; in
# CI, .ci/run's shared kernel cache holds their kernels).
test: deps
	@$(MAKE) --no-print-directory all $(TEST_BIN) $(if $(SANITIZE),,sim)
	@BUILD=$(BUILD) $(if $(SANITIZE),FUZZ_GRAPHS=1000) sh tests/run.sh

# Parts of make test: the C test programs only, the Lua tests only (tests/lua/test_*.lua).
test-c: deps
	@$(MAKE) --no-print-directory all $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/run.sh c
test-lua: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh tests/run.sh lua

# docs/ops.md is generated from trace/ops.def (make test checks that it is current).
$(BUILD)/tools/gen_ops: tools/gen_ops.c trace/ops.def
	@mkdir -p $(dir $@)
	$(CC) $(WARN) -O1 -I. -o $@ tools/gen_ops.c
docs: $(BUILD)/tools/gen_ops
	$(BUILD)/tools/gen_ops > docs/ops.md

# No file includes or calls a name from a layer above its own (docs/design.md); make test runs it.
check-layers: all
	@sh tools/check_layers.sh $(BUILD)

# Every kernel the op tests, the fuzzer and the Lua tests lower, compiled by NVRTC for sm_80 and
# sm_90a (no GPU needed; `make test` does the same for the whole suite when libnvrtc is present).
test-nvrtc: all $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/nvrtc_check.sh

# The simulated GPU (tests/sim, docs/cuda.md "The simulated GPU"): stand-ins for libcuda.so.1 and
# libnvrtc.so that run the generated CUDA C on the CPU. ST_CUDA_SIM=1 loads them; nothing of it is
# part of the library. Kernels are compiled by $(SIM_CXX) with SIM_CXXFLAGS, the prelude from a
# precompiled header built with the same flags. -fno-gnu-unique: a module (a shared object) with a
# STB_GNU_UNIQUE symbol (a template's static member) could never be unloaded (glibc marks it
# NODELETE), and the driver's dlopen by fd name would find it again (sim_driver.c cuModuleUnload).
# -fno-exceptions: a module then needs nothing of libstdc++, and sim_nvrtc.c links it without the
# standard libraries (-nostdlib: 0.02 s a module instead of 0.09, about a quarter of each compile).
SIM := $(BUILD)/sim
SIM_CXX ?= g++
SIM_CXXFLAGS := -std=c++17 -O1 -fPIC -ffp-contract=off -fno-ipa-reference -fno-gnu-unique -fno-exceptions -fsanitize=thread -w
SIM_WARN := -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Werror=implicit-function-declaration
SIM_HDR := tests/sim/sim_rt.h tests/sim/sim_cuda.h tests/sim/sim_fiber.h tests/sim/sim_mma.h
sim: $(SIM)/libcuda.so.1 $(SIM)/libnvrtc.so $(SIM)/sim_pre.h.gch $(SIM)/test_sim_mma $(SIM)/test_sim
$(SIM)/libcuda.so.1: tests/sim/sim_driver.c tests/sim/sim_mma.c $(SIM_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(SIM_WARN) -O2 -g -fPIC -shared -fvisibility=hidden -o $@ tests/sim/sim_driver.c tests/sim/sim_mma.c -ldl
$(SIM)/libnvrtc.so: tests/sim/sim_nvrtc.c tests/sim/sim_rt.h Makefile
	@mkdir -p $(dir $@)
	$(CC) $(SIM_WARN) -O2 -g -fPIC -shared -fvisibility=hidden '-DSIM_CXX="$(SIM_CXX)"' \
	  '-DSIM_CXXFLAGS="$(SIM_CXXFLAGS)"' -o $@ tests/sim/sim_nvrtc.c -ldl
$(SIM)/sim_pre.h: tests/sim/sim_cuda.h tests/sim/sim_rt.h $(BUILD)/gen/prelude.h
	@mkdir -p $(dir $@)
	cp tests/sim/sim_cuda.h tests/sim/sim_rt.h $(SIM)/
	{ echo '#include "sim_cuda.h"'; cat $(BUILD)/gen/prelude.h; } > $@
$(SIM)/sim_pre.h.gch: $(SIM)/sim_pre.h Makefile
	$(SIM_CXX) $(SIM_CXXFLAGS) -x c++-header $< -o $@
$(SIM)/test_sim: tests/sim/test_sim.c $(BUILD)/libstitch.a tests/test.h
	$(CC) $(CPPFLAGS) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libstitch.a $(LDSAN) $(LDLIBS)
$(SIM)/test_sim_mma: tests/sim/test_sim_mma.c tests/sim/sim_mma.c tests/sim/sim_mma.h
	$(CC) $(SIM_WARN) -O1 -I tests/sim -o $@ tests/sim/test_sim_mma.c tests/sim/sim_mma.c -lm

# Five planted bugs (a barrier, a tail guard, a shuffle mask, an mma fragment, a parameter's size),
# each of which the simulated GPU must catch (tests/sim/mutate.sh; ~15 s on an idle 2-core machine;
# make test runs it after test-sim).
sim-mutations: all sim
	@sh tests/sim/mutate.sh

# The op, autograd and Lua tests and the differential fuzzer on the simulated cuda:0, the default
# device, with threads scheduled forward, in reverse and in a seeded random order (make test runs it).
test-sim: all sim $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/sim/run.sh

# On a GPU machine: the op suite, the fuzzer and the Lua tests on the CUDA device (docs/cuda.md).
test-gpu: all $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/gpu/run.sh

# libFuzzer harnesses of the file readers and the Lua indexing parser (tests/fuzz): FUZZ=1 builds
# them; `make fuzz-files [FUZZ_SECONDS=600]` runs each that long (make test runs each briefly:
# tests/run_fuzz_files.sh).
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_file.h $(BUILD)/libstitch.a $(LUA_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(OPT) -fsanitize=fuzzer -Itests/fuzz -o $@ $< $(LUA_OBJ) $(BUILD)/libstitch.a \
	  $(LUA_A) $(LDLIBS)
fuzz-bins: $(FUZZ_BIN)
fuzz-files:
	@$(MAKE) --no-print-directory FUZZ=1 -j2 fuzz-bins
	@sh tests/fuzz/run.sh $(or $(FUZZ_SECONDS),600)

fuzz: all $(BUILD)/tests/test_fuzz
	$(BUILD)/tests/test_fuzz --graphs $(or $(N),20000) --seed $(or $(SEED),1) $(if $(J),--jit-every $(J))

# The main job: train the Fashion-MNIST MLP (installs the dataset's Debian package when root).
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
demo: deps
	@$(MAKE) --no-print-directory all
	@[ -f $(FMNIST) ] || [ -n "$$FASHION_MNIST_DIR" ] || { \
	  if [ "$$(id -u)" = 0 ]; then echo "installing: dataset-fashion-mnist"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >/dev/null || exit 1; \
	  else echo "missing dataset; run: sudo apt-get install -y dataset-fashion-mnist"; exit 1; fi; }
	$(BUILD)/stitch examples/fashion_mnist_mlp.lua $(ARGS)

bench: all
	$(MAKE) -C bench BUILD=../$(BUILD)

# Installing. PREFIX/lib/lua/5.4 is where Debian's lua5.4 looks for C modules under /usr/local;
# another PREFIX needs LUA_CPATH="PREFIX/lib/lua/5.4/?.so;;". LUA_CMOD overrides the module's
# directory (luarocks: stitch-*.rockspec). stitch.pc tells pkg-config the flags.
PREFIX   ?= /usr/local
LIBDIR   ?= $(PREFIX)/lib
LUA_CMOD ?= $(LIBDIR)/lua/5.4
VERSION  := 0.1.0
# The Lua module alone (luarocks: stitch-*.rockspec).
module: $(BUILD)/stitch.so
install-module: module
	install -d $(DESTDIR)$(LUA_CMOD)
	install -m 755 $(BUILD)/stitch.so $(DESTDIR)$(LUA_CMOD)/stitch.so

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LUA_CMOD)
	install -m 644 include/stitch.h $(DESTDIR)$(PREFIX)/include/stitch.h
	install -m 644 $(BUILD)/libstitch.a $(DESTDIR)$(LIBDIR)/libstitch.a
	install -m 755 $(BUILD)/libstitch.so $(DESTDIR)$(LIBDIR)/libstitch.so
	install -m 755 $(BUILD)/stitch $(DESTDIR)$(PREFIX)/bin/stitch
	install -m 755 $(BUILD)/stitch.so $(DESTDIR)$(LUA_CMOD)/stitch.so
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' tools/stitch.pc.in \
	    > $(DESTDIR)$(LIBDIR)/pkgconfig/stitch.pc

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
