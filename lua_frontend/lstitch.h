/*
 * lstitch.h — the `stitch` Lua module's entry point, shared by the module (lstitch.c, also built as
 * build/stitch.so for a stock lua5.4) and the executable (main.c), which preloads it as `st`.
 */
#ifndef LSTITCH_H
#define LSTITCH_H

#include "stitch.h"
#include <lua.h>

/* Opens the module: pushes the module table. Exported (default visibility) so a stock lua5.4 can
 * find it in stitch.so with `require "stitch"`. */
ST_API int luaopen_stitch(lua_State *L);

#endif
