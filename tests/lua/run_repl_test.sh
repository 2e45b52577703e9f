#!/bin/sh
# run_repl_test.sh — the REPL with piped input: expressions print their value, a multi-line function
# definition works, an error prints a traceback and the next line still runs; plus -e, -v, -h, -i,
# the script `arg` table, the global help and Tab completion (through a pseudo-terminal). Prints
# PASS/FAIL lines; exits 1 on any failure.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
ST="$BUILD/stitch"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() { # name, file, fixed string expected in it
    if grep -qF -- "$3" "$2"; then echo "PASS $1"; else
        echo "FAIL $1: expected '$3' in output:"; sed 's/^/    /' "$2"; fails=$((fails + 1)); fi
}
checkline() { # name, file, whole line expected in it
    if grep -qxF -- "$3" "$2"; then echo "PASS $1"; else
        echo "FAIL $1: expected the line '$3' in output:"; sed 's/^/    /' "$2"; fails=$((fails + 1)); fi
}
checkno() { # name, file, fixed string that must not be there
    if grep -qF -- "$3" "$2"; then echo "FAIL $1: unexpected '$3' in output:"; sed 's/^/    /' "$2"; fails=$((fails + 1));
    else echo "PASS $1"; fi
}

cat > "$tmp/in.lua" <<'LUA'
1 + 2
st.ones(2) + 1
function sq(x)
  return x * x
end
sq(7)
error("boom")
print("after error")
local t = st.tensor{1, 2,
  3}
x = st.arange(3)
x:sum()
st.ones(2, 3) + st.ones(4)
x[1] = 9
x
LUA
"$ST" < "$tmp/in.lua" > "$tmp/out" 2>&1
rc=$?
checkline repl_expression "$tmp/out" "3"
check repl_tensor "$tmp/out" "tensor([2.0000, 2.0000], dtype=f32"
checkline repl_multiline_function "$tmp/out" "49"
check repl_error_message "$tmp/out" "boom"
check repl_error_traceback "$tmp/out" "stack traceback"
check repl_continues_after_error "$tmp/out" "after error"
check repl_shape_error "$tmp/out" "(2, 3)"
check repl_int_sum "$tmp/out" "tensor(3, dtype=i64"
check repl_assignment "$tmp/out" "tensor([9, 1, 2], dtype=i64"
checkno repl_no_incomplete_error "$tmp/out" "<eof>"
if [ $rc -eq 0 ]; then echo "PASS repl_exit_status"; else echo "FAIL repl_exit_status: $rc"; fails=$((fails + 1)); fi

"$ST" -e 'print(st.ones(2):sum():item())' > "$tmp/e" 2>&1
check option_e "$tmp/e" "2.0"
"$ST" -v > "$tmp/v" 2>&1
check option_v "$tmp/v" "stitch"
"$ST" -h > "$tmp/h" 2>&1
check option_h "$tmp/h" "usage"

cat > "$tmp/script.lua" <<'LUA'
print("args", arg[0] ~= nil, arg[1], arg[2], #arg, ...)
LUA
"$ST" "$tmp/script.lua" a b > "$tmp/s" 2>&1
check script_args "$tmp/s" "args	true	a	b	2	a	b"

printf 'error("bad")\n' > "$tmp/bad.lua"
"$ST" "$tmp/bad.lua" > "$tmp/b" 2>&1
rc=$?
check script_error_message "$tmp/b" "bad"
if [ $rc -ne 0 ]; then echo "PASS script_error_status"; else echo "FAIL script_error_status: 0"; fails=$((fails + 1)); fi

printf 'y = 41\n' > "$tmp/i.lua"
echo 'y + 1' | "$ST" -i "$tmp/i.lua" > "$tmp/i" 2>&1
check option_i "$tmp/i" "42"

echo 'x = (' | "$ST" > "$tmp/u" 2>&1
check repl_eof_in_chunk "$tmp/u" "<eof>"

# help: a global in the REPL (st.help; lua_frontend/lib/repl.lua), not in scripts
printf 'help(st.zeros)\nhelp("x:reshape")\nhelp(42)\n' | "$ST" > "$tmp/help" 2>&1
check repl_help_function "$tmp/help" "st.zeros(size... [, dtype]) -- "
check repl_help_name "$tmp/help" "x:reshape(size...) -- "
check repl_help_unknown "$tmp/help" "help: no help for a number value (42)"
"$ST" -e 'print(help, type(st.help))' > "$tmp/nohelp" 2>&1
check script_no_global_help "$tmp/nohelp" "nil	function"
printf 'function help() return "mine" end\n' > "$tmp/own.lua"
echo 'help()' | "$ST" -i "$tmp/own.lua" > "$tmp/own" 2>&1
checkline repl_keeps_own_help "$tmp/own" "mine"

# Tab completion through libedit on a pseudo-terminal (script(1) from util-linux; skipped without
# it): a method (x:resh -> x:reshape) and a nested field (st.nn.Lin -> st.nn.Linear); each result
# line appears only when the Tab completed the name. The writer keeps script's stdin open until
# the REPL has exited (os.exit), then dies of SIGPIPE.
if command -v script > /dev/null 2>&1; then
    mkdir -p "$tmp/home"
    # The writer types once the REPL has printed something (its terminal is set up; on a loaded
    # machine the start can take seconds), one line at a time.
    : > "$tmp/tty.raw"
    { i=0; while [ ! -s "$tmp/tty.raw" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
      for line in 'x = st.arange(7)' 'x:resh\t(7, 1):sum():item() * 6' 'st.nn.Lin\t.__name' 'os.exit(0)'; do
          sleep 0.3; printf "$line\n"; done
      i=0; while [ $i -lt 300 ]; do sleep 0.1; printf ' ' 2> /dev/null || exit 0; i=$((i + 1)); done; } |
        HOME="$tmp/home" TERM=dumb timeout 60 script -qec "$ST" /dev/null > "$tmp/tty.raw" 2>&1
    tr -d '\r' < "$tmp/tty.raw" > "$tmp/tty"
    checkline repl_tab_completes_method "$tmp/tty" "126"
    checkline repl_tab_completes_field "$tmp/tty" "Linear"
else
    echo "  repl_tab_completion: skipped (no script(1))"
fi

[ $fails -eq 0 ] || exit 1
