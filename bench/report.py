"""report.py — turn the `key value` result files of one bench run into the ratio lines.

Run: python3 bench/report.py RESULTS_FILE...   (bench/run.sh does; needs no numpy)

A missing key (a case that failed or was skipped) prints as n/a instead of a number; the goals
are checked and printed as met / MISSED so a miss cannot go unnoticed.
"""
import sys


def load(paths):
    r = {}
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2:
                        try:
                            r[parts[0]] = float(parts[1])
                        except ValueError:
                            pass
        except OSError:
            pass
    return r


def main():
    r = load(sys.argv[1:])

    def g(k, fmt="%.2f"):
        return fmt % r[k] if k in r else "n/a"

    mem = r.get("memcpy_gbs")
    for case, np_key, label in [("chain", "np_chain", "chain (gelu_tanh)"),
                                ("chain_erf", None, "chain_erf (gelu erf)"),
                                ("rowsum", "np_rowsum", "rowsum"),
                                ("softmax", "np_softmax", "softmax")]:
        s = r.get(case + "_gbs")
        line = "%s: stitch %s GB/s, memcpy %s GB/s" % (label, g(case + "_gbs"), g("memcpy_gbs"))
        if s is not None and mem:
            line += " (%.0f%% of memcpy)" % (100.0 * s / mem)
        if np_key is None:
            line += ", numpy n/a (numpy has no erf)"
        else:
            npv = r.get(np_key + "_gbs")
            line += ", numpy %s GB/s" % g(np_key + "_gbs")
            if s is not None and npv:
                line += " (stitch/numpy = %.2f x)" % (s / npv)
        hand = r.get(case + "_hand2_gbs")
        if s is not None and hand:
            line += "; hand-written loop %.2f GB/s on 2 threads (stitch = %.0f%% of it)" % (
                hand, 100.0 * s / hand)
        print(line)
        if case + "_first_ms" in r:
            print("    cold run %s ms (compile %s ms, %s kernels compiled), warm %s ms, "
                  "%s launches + %s interpreted groups/iter" % (
                      g(case + "_first_ms", "%.0f"), g(case + "_compile_ms", "%.0f"),
                      g(case + "_compiled", "%.0f"), g(case + "_best_ms"),
                      g(case + "_launches", "%.1f"), g(case + "_interp", "%.1f")))
        if case == "chain" and "chain_handfresh2_gbs" in r:
            print("    hand-written loop writing a freshly malloc'ed output each iteration: %s GB/s "
                  "(2 threads); a fresh 64 MiB buffer costs %s ms of page faults (%s ms with "
                  "MADV_HUGEPAGE)" % (g("chain_handfresh2_gbs"), g("fresh_touch_ms", "%.1f"),
                                      g("fresh_touch_huge_ms", "%.1f")))
            print("    what-if (hand loop, 2 threads): fresh output + MADV_HUGEPAGE %s GB/s"
                  % g("chain_whatif_huge_gbs"))
    print("record: C %s us/op, Lua %s us/op (pure record: handle released each op, nothing pending)"
          % (g("c_record_us", "%.3f"), g("lua_record_us", "%.3f")))
    print("    C x + tensor %s us/op; C kept chain incl. auto-flushes %s us/op; Lua without <close> "
          "(GC-released) %s us/op" % (g("c_record_tensor_us", "%.3f"), g("c_record_chain_us", "%.3f"),
                                      g("lua_record_gc_us", "%.3f")))

    def goal(name, ok):
        print("goal %-34s %s" % (name, "n/a" if ok is None else ("met" if ok else "MISSED")))

    s, npv = r.get("chain_gbs"), r.get("np_chain_gbs")
    goal("chain >= 3x numpy:", None if s is None or not npv else s >= 3 * npv)
    c = r.get("c_record_us")
    goal("record from C <= 1 us/op:", None if c is None else c <= 1.0)
    lu = r.get("lua_record_us")
    goal("record from Lua <= 3 us/op:", None if lu is None else lu <= 3.0)


if __name__ == "__main__":
    main()
