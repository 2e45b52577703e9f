/*
 * hash.c — the one hash of stitch: kernel and plan cache keys, checksums of cache files.
 */
#include "base/base.h"

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
/* A 64-bit finalizer with full avalanche (the widely used splitmix64 constants). */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Two lanes with different multipliers and rotations see every 8-byte word; the tail is packed
 * into one more word; the length and both lanes are mixed at the end. */
base_hash base_hash128(const void *data, size_t n, base_hash seed) {
    const unsigned char *p = data;
    const uint64_t P1 = 0x9e3779b97f4a7c15ULL, P2 = 0xd6e8feb86659fd93ULL;
    uint64_t a = seed.h[0] ^ 0x243f6a8885a308d3ULL, b = seed.h[1] ^ 0x13198a2e03707344ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        a = rotl64((a ^ w) * P1, 29);
        b = rotl64((b + rotl64(w, 21)) * P2, 33) ^ a;
    }
    uint64_t w = 0;
    for (size_t j = 0; i + j < n; j++) w |= (uint64_t)p[i + j] << (8 * j);
    a = rotl64((a ^ w) * P1, 29);
    b = rotl64((b + rotl64(w, 21)) * P2, 33) ^ a;
    base_hash k;
    k.h[0] = mix64(a ^ mix64(b + (uint64_t)n));
    k.h[1] = mix64(b ^ mix64(k.h[0] + 0x452821e638d01377ULL));
    return k;
}

void base_hash_hex(base_hash k, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.h[0], (unsigned long long)k.h[1]);
}
