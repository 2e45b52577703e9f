# stitch — build
#   make            build/libstitch.a, build/libstitch.so, build/stitch, build/stitch.so
#   make test       the whole suite; last line "N passed, N failed"
#   make check-layers  no dependency runs from a lower layer to a higher one (part of make test)
#   make test-nvrtc every generated CUDA kernel compiled by NVRTC for sm_80 and sm_90 (no GPU needed)
#   make test-gpu   the suite on a CUDA GPU (docs/cuda.md)
#   make demo       the main job: train the Fashion-MNIST MLP (ARGS="--epochs 1")
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

.PHONY: all deps test test-c test-lua test-nvrtc test-gpu check-layers fuzz demo bench clean
all: deps $(BUILD)/libstitch.a $(BUILD)/libstitch.so $(BUILD)/stitch $(BUILD)/stitch.so

# Install missing Debian packages when root; otherwise print the apt-get line.
deps:
	@missing=""; \
	[ -f $(LUA_INC)/lua.h ] && [ -f $(LUA_A) ] || missing="$$missing liblua5.4-dev"; \
	[ -f /usr/include/uthash.h ] || missing="$$missing uthash-dev"; \
	[ -f /usr/include/histedit.h ] || missing="$$missing libedit-dev"; \
	[ -f /usr/include/zlib.h ] || missing="$$missing zlib1g-dev"; \
	command -v lua5.4 >/dev/null || missing="$$missing lua5.4"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null || exit 1; \
	  else echo "missing packages; run: sudo apt-get install -y$$missing"; exit 1; fi; \
	fi

$(BUILD)/obj/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The prelude is compiled into the runtime (interpreter) and embedded as text for the JIT.
$(BUILD)/gen/prelude_src.c: base/opmath.h tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh st_prelude_src $< > $@
$(BUILD)/obj/gen/prelude_src.o: $(BUILD)/gen/prelude_src.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# The Lua training library (lua_frontend/lib/*.lua) is embedded into the module and the executable.
$(BUILD)/gen/lualib.c: $(LUA_LIB) tools/embed_lua.sh lua_frontend/lib
	@mkdir -p $(dir $@)
	sh tools/embed_lua.sh $(LUA_LIB) > $@
$(BUILD)/obj/gen/lualib.o: $(BUILD)/gen/lualib.c
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

test: all $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/run.sh

# No file includes or calls a name from a layer above its own (docs/design.md); make test runs it.
check-layers: all
	@sh tools/check_layers.sh $(BUILD)

# Every kernel the op tests, the fuzzer and the Lua tests lower, compiled by NVRTC for sm_80 and
# sm_90 (no GPU needed; `make test` does the same for the whole suite when libnvrtc is present).
test-nvrtc: all $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/nvrtc_check.sh

# On a GPU machine: the op suite, the fuzzer and the Lua tests on the CUDA device (docs/cuda.md).
test-gpu: all $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/gpu/run.sh

fuzz: all $(BUILD)/tests/test_fuzz
	$(BUILD)/tests/test_fuzz --graphs $(or $(N),20000) --seed $(or $(SEED),1) $(if $(J),--jit-every $(J))

# The main job: train the Fashion-MNIST MLP (installs the dataset's Debian package when root).
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
demo: all
	@[ -f $(FMNIST) ] || [ -n "$$FASHION_MNIST_DIR" ] || { \
	  if [ "$$(id -u)" = 0 ]; then echo "installing: dataset-fashion-mnist"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >/dev/null || exit 1; \
	  else echo "missing dataset; run: sudo apt-get install -y dataset-fashion-mnist"; exit 1; fi; }
	$(BUILD)/stitch examples/fashion_mnist_mlp.lua $(ARGS)

bench: all
	$(MAKE) -C bench BUILD=../$(BUILD)

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
