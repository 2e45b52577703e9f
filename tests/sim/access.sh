#!/bin/sh
# sim/access.sh — memory access of stitch's own GPU kernels, judged by the simulator's metrics
# (ST_SIM_METRICS=1: per launch, the share of each fetched 32-byte sector that the kernel used).
# Each case must use at least 90% of what it fetches: a 2-D pointwise group (AdamW's multi-tensor
# update: once a row per thread, 14%), a column reduction and layernorm's backward (dw, db: once a
# column's threads a row apart, 15%). Run by tests/sim/run.sh; prints PASS/FAIL lines.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
export ST_CUDA_SIM=1 ST_SIM_METRICS=1
case_() { # name lua
    log=$(mktemp)
    if ! "$BUILD"/stitch -e "$2" > "$log" 2>&1; then echo "FAIL $1: stitch failed:"; tail -n 5 "$log"; rm -f "$log"; return; fi
    worst=$(sed -n 's/.*(\([0-9]*\)% of the fetched bytes used).*/\1/p' "$log" | sort -n | head -1)
    n=$(grep -c 'of the fetched bytes used' "$log")
    if [ -z "$worst" ]; then echo "FAIL $1: no metrics line (is the simulated GPU the device?)"
    elif [ "$worst" -lt 90 ]; then echo "FAIL $1: a kernel used $worst% of the bytes it fetched (want >= 90%):"; grep 'fetched' "$log" | head -5
    else echo "PASS $1 ($n launches, worst $worst% of fetched bytes used)"; fi
    rm -f "$log"
}
case_ pointwise_2d 'local p = st.randn({300, 7}); local g = st.randn({300, 7}); st.sync(p, g)
  local y = p * 0.9 + g:sqrt():abs() * 0.1; st.sync(y)'
case_ adamw_multi_tensor 'local ps = {}
  for i = 1, 3 do local p = st.randn({200 + i, 9}); p.requires_grad = true; p.grad = st.randn({200 + i, 9}); ps[i] = p end
  st.sync(table.unpack(ps)); local o = st.optim.AdamW(ps, {lr = 1e-3}); o:step(); st.sync()'
case_ column_sum 'local x = st.randn({300, 96}); st.sync(x); st.sync(x:sum(1))'
case_ layernorm_backward 'local F = st.nn.functional
  local x = st.randn({256, 128}):requires_grad_(); local w = st.randn({128}):requires_grad_()
  local b = st.randn({128}):requires_grad_(); local dy = st.randn({256, 128}); st.sync(x, w, b, dy)
  local y = F.layer_norm(x, {128}, w, b); y:backward(dy); st.sync(y, x.grad, w.grad, b.grad)'
