#!/usr/bin/env python3
"""opmath_consts.py -- prints the constants, tables and polynomial fits of base/opmath.h's own
transcendental functions (needs mpmath; not part of the build: run it to check or to change them).

  ln 2 and pi/2 split into pieces (Cody-Waite: n times a piece of 33 or 42 bits is exact),
  the bits of 2/pi (Payne-Hanek: 32-bit words, and the f32 table of overlapping words),
  log(0.75 + j/128) as hi + lo (the double log),
  Taylor coefficients (exp, sin, cos, the atanh series of log),
  Chebyshev fits of erf(x)/x in x^2 on [0, 0.875] and of erfcx(x) = erfc(x) e^(x^2) in
  s = (4/(4+x) - mid) / half on [0.875, 6] (the double erf), with their errors before the
  coefficients are rounded to double.
"""
from mpmath import mp, mpf, erf, erfc, exp, log, sqrt, pi, factorial, chebyfit

mp.dps = 400


def h(v):
    return float(v).hex()


def trunc_bits(v, bits):  # v > 0, keeping `bits` significant bits
    e = int(mp.floor(mp.log(v, 2)))
    scale = mpf(2) ** (bits - 1 - e)
    return mp.floor(v * scale) / scale


def words(hexlist, per_line=7):
    out = []
    for i in range(0, len(hexlist), per_line):
        out.append("    " + ", ".join(hexlist[i:i + per_line]) + ",")
    return "\n".join(out)


ln2 = log(2)
ln2hi = trunc_bits(ln2, 42)
print("ST_LN2_HI", h(ln2hi), " ST_LN2_LO", h(ln2 - ln2hi), " ln2", h(ln2), " 1/ln2", h(1 / ln2))
p2 = pi / 2
p1 = trunc_bits(p2, 33); r = p2 - p1
q2 = trunc_bits(r, 33); r -= q2
q3 = trunc_bits(r, 33); r -= q3
print("pi/2 in 33-bit pieces:", h(p1), h(q2), h(q3), "tail", h(r), " (f32: second piece", h(p2 - p1), ")")
print("pi/2 hi, lo:", h(p2), h(p2 - mpf(float(p2))), " 2/pi", h(2 / pi), " pi/2 * 2^-62", h(p2 * mpf(2) ** -62))

NB = 1400
bits = int(mp.floor((2 / pi) * mpf(2) ** NB))


def word(start):  # the 32 bits of 2/pi from bit `start` (bit 1 is the first after the point)
    v = 0
    for i in range(start, start + 32):
        v = (v << 1) | ((bits >> (NB - i)) & 1 if 1 <= i <= NB else 0)
    return v


print("2/pi, 32-bit words (f64 Payne-Hanek):")
print(words(["0x%08xu" % word(32 * k + 1) for k in range(40)]))
print("2/pi, tab[j] = the 32 bits from bit 8j - 9 (f32 Payne-Hanek):")
print(words(["0x%08xu" % word(8 * j - 9) for j in range(23)]))

print("log(0.75 + j/128), j = 0..96: {hi, lo}")
rows = []
for j in range(97):
    v = log(mpf(3) / 4 + mpf(j) / 128)
    rows.append("{%s, %s}" % (h(v), h(v - mpf(float(v)))))
print(words(rows, 2))

mp.dps = 50
print("1/k!, k = 2..17:", ", ".join(h(1 / factorial(k)) for k in range(2, 18)))
print("2/(2k+1), k = 1..9:", ", ".join(h(mpf(2) / (2 * k + 1)) for k in range(1, 10)))
print("1/(2k+1), k = 1..9:", ", ".join(h(mpf(1) / (2 * k + 1)) for k in range(1, 10)))

X = mpf(0.875)
fa = lambda z: erf(sqrt(z)) / sqrt(z) if z > 0 else 2 / sqrt(pi)
ca, ea = chebyfit(fa, [0, X * X], 12, error=True)
print("erf(x)/x in z = x^2 on [0, 0.875^2], z^11 first; max error %.2g:" % float(ea))
print(words([h(c) for c in ca], 4))
K = 4
tlo, thi = mpf(K) / (K + 6), mpf(K) / (K + X)
mid, half = float((tlo + thi) / 2), float((thi - tlo) / 2)
g = lambda s: erfc(K / (mid + half * s) - K) * exp((K / (mid + half * s) - K) ** 2)
cb, eb = chebyfit(g, [-1, 1], 18, error=True)
print("erfcx in s = (4/(4+x) - %s) / %s on [0.875, 6], s^0 first; max error %.2g:" % (h(mid), h(half), float(eb)))
print(words([h(c) for c in reversed(cb)], 3))
