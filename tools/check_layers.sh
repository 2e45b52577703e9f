#!/bin/sh
# check_layers.sh [BUILD] — fails when a file includes or calls a name from a layer above its own.
# The layers, bottom up (docs/design.md): a file may use its own folder and the folders before it.
# Calls are read from the objects (nm: who defines each symbol, who uses it); includes from the
# sources. gen/prelude_src.o is base's (the op math as text), gen/lualib.o the Lua frontend's.
LAYERS="base device trace ir jit fuser runtime io lua_frontend"
cd "$(dirname "$0")/.." || exit 1
rank() { # folder -> its position in LAYERS (empty when not a layer)
    i=0; for l in $LAYERS; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done
}
bad=0
# includes: "folder/file.h" of a higher layer
for d in $LAYERS; do
    r=$(rank "$d")
    for f in "$d"/*.c "$d"/*.h; do
        [ -f "$f" ] || continue
        for inc in $(sed -n 's/^#include "\([a-z_]*\)\/[^"]*".*/\1/p' "$f" | sort -u); do
            ri=$(rank "$inc"); [ -n "$ri" ] || continue
            if [ "$ri" -gt "$r" ]; then echo "FAIL check_layers: $f ($d) includes from $inc"; bad=1; fi
        done
    done
done
# calls: an undefined symbol of an object defined by an object of a higher layer
BUILD=${1:-build}
objs=""
for d in $LAYERS; do
    for f in "$d"/*.c; do [ -f "$f" ] && objs="$objs $BUILD/obj/${f%.c}.o"; done
done
objs="$objs $BUILD/obj/gen/prelude_src.o $BUILD/obj/gen/lualib.o"
for o in $objs; do [ -f "$o" ] || { echo "FAIL check_layers: $o missing (build first)"; exit 1; }; done
nm -A $objs | awk -v layers="$LAYERS" '
    BEGIN { n = split(layers, L, " "); for (i = 1; i <= n; i++) R[L[i]] = i }
    function folder(o) {   # .../obj/<folder>/<name>.o -> folder (gen objects belong to a layer)
        if (o ~ /\/gen\/prelude_src\.o$/) return "base"
        if (o ~ /\/gen\/lualib\.o$/) return "lua_frontend"
        n = split(o, p, "/"); return p[n - 1]
    }
    { obj = $1; sub(/:.*/, "", obj) }
    NF == 3 && $2 ~ /^[TDBRC]$/ { def[$3] = obj; next }
    NF == 3 && $2 == "U" { use[++nu] = obj " " $3 }
    END {
        for (i = 1; i <= nu; i++) {
            split(use[i], u, " ")
            if (!(u[2] in def)) continue
            a = folder(u[1]); b = folder(def[u[2]])
            if ((a in R) && (b in R) && R[b] > R[a]) { printf "FAIL check_layers: %s (%s) calls %s of %s\n", u[1], a, u[2], def[u[2]]; bad = 1 }
        }
        exit bad
    }' || bad=1
[ $bad -eq 0 ] && echo "PASS check_layers: no dependency runs upward ($LAYERS)"
exit $bad
