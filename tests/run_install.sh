#!/bin/sh
# run_install.sh — `make install` into a temporary prefix works as a user would use it: the C
# example builds with `pkg-config --cflags --libs stitch` and runs against the installed shared
# library, a stock lua5.4 requires the installed module, and `luarocks make` (when luarocks is
# installed) builds and installs the module into a temporary tree. The plain build only (the
# sanitizer build's objects need the sanitizer runtime at link time).
BUILD=${BUILD:-build}
case "$BUILD" in *san*) echo "  (install: checked in the plain build)"; exit 0 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! make --no-print-directory -s install BUILD="$BUILD" PREFIX="$tmp/prefix" > "$tmp/log" 2>&1; then
    echo "FAIL make_install: $(tail -c 600 "$tmp/log")"; exit 1
fi
for f in include/stitch.h lib/libstitch.a lib/libstitch.so bin/stitch lib/lua/5.4/stitch.so lib/pkgconfig/stitch.pc; do
    [ -f "$tmp/prefix/$f" ] || { echo "FAIL make_install: $f not installed"; exit 1; }
done
echo "PASS make_install"
if ! command -v pkg-config > /dev/null; then
    echo "FAIL install_pkg_config: pkg-config is not installed (apt-get install pkg-config)"
else
    flags=$(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs stitch)
    if cc examples/c_example.c $flags -o "$tmp/c_example" 2> "$tmp/log"; then
        out=$(cd "$tmp" && LD_LIBRARY_PATH="$tmp/prefix/lib" ./c_example 2>&1)
        if echo "$out" | grep -q "row sums of exp(2x): 465.41[0-9]* 18776[0-9]"; then
            echo "PASS install_pkg_config (cc c_example.c $flags)"
        else
            echo "FAIL install_pkg_config: unexpected output: $out"
        fi
    else
        echo "FAIL install_pkg_config: cc c_example.c $flags: $(head -c 600 "$tmp/log")"
    fi
fi
out=$(cd "$tmp" && ST_NVRTC_CHECK=0 LUA_CPATH="$tmp/prefix/lib/lua/5.4/?.so" lua5.4 -e \
    'local st = require "stitch"; print((st.arange(0, 5) * 2):sum():item(), package.searchpath("stitch", package.cpath))' 2>&1)
case "$out" in
    "20	$tmp/prefix/lib/lua/5.4/stitch.so") echo "PASS install_lua_module" ;;
    *) echo "FAIL install_lua_module: $out" ;;
esac
if command -v luarocks > /dev/null; then
    if luarocks --lua-version 5.4 make --tree "$tmp/rocks" stitch-*.rockspec > "$tmp/log" 2>&1 &&
        out=$(cd "$tmp" && ST_NVRTC_CHECK=0 LUA_CPATH="$tmp/rocks/lib/lua/5.4/?.so" lua5.4 -e \
              'local st = require "stitch"; print(st.ones(3):sum():item())' 2>&1) && [ "$out" = "3.0" ]; then
        echo "PASS luarocks_make"
    else
        echo "FAIL luarocks_make: $out $(tail -c 600 "$tmp/log")"
    fi
else
    echo "  (luarocks not installed: the rockspec is not tried)"
fi
