-- The Lua module of stitch for luarocks: `luarocks make` in this directory builds build/stitch.so
-- with the project's Makefile (`make module`) and installs it where the tree's lua5.4 finds it.
-- The C library, the header and the `stitch` executable are `make install`'s (README.md).
rockspec_format = "3.0"
package = "stitch"
version = "0.1.0-1"
source = {
   url = "git+file://.",
}
description = {
   summary = "A tensor runtime with lazy tracing fusion",
   detailed = [[
Eager tensor code (Lua, C) recorded into a lazy trace and run as fused kernels compiled at run
time: C for the CPU (the system compiler), CUDA C for NVIDIA GPUs (NVRTC, loaded when present).
]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.4, < 5.5",
}
build = {
   type = "make",
   build_target = "module",
   build_variables = {
      LUA_INC = "$(LUA_INCDIR)",
   },
   install_target = "install-module",
   install_variables = {
      LUA_CMOD = "$(LIBDIR)",
   },
}
