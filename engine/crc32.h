/* CRC-32 exactly as zlib.crc32 (the zlib polynomial, reflected), shared by the
 * C twins of engine's codecs (engine/<store>/_native.c include this file).
 *
 *   crc_init()               fill the tables; call once from PyInit__native
 *   crc_update(crc, p, len)  zlib.crc32(p[:len], crc): slicing by 8
 *   crc_extend(crc, p, len)  zlib.crc32(p[:len], crc): carry-less multiplication
 *                            (PCLMULQDQ) for 64 bytes and more where the CPU has
 *                            it (crc_fold_ok, set by crc_init), else slicing by 8
 *   crc32_of(p, len)         crc_extend(0, p, len)
 *
 * Everything is static: each extension gets its own copy of the tables.
 */
#ifndef ENGINE_CRC32_H
#define ENGINE_CRC32_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_CRC_FOLD 1
#endif

/* ---- CRC-32 (the zlib polynomial, reflected), slicing by 8 ---------------- */
static uint32_t crc_table[8][256];

static void crc_init_tables(void);
#ifdef HAVE_CRC_FOLD
static int crc_fold_ok;
#endif

/* Fill the tables and decide once whether crc_fold may run on this CPU. */
static void
crc_init(void)
{
    crc_init_tables();
#ifdef HAVE_CRC_FOLD
    __builtin_cpu_init();
    crc_fold_ok = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
}

static void
crc_init_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320U ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int k = 1; k < 8; k++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[k][n] = c;
        }
    }
}

/* crc32(buf, crc) exactly as zlib.crc32(buf, crc). */
static uint32_t
crc_update(uint32_t crc, const unsigned char *p, size_t len)
{
    crc = ~crc;
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    if (len >= 4) { /* slicing by 4 once: the 4 to 7 bytes a record's tail often leaves */
        uint32_t w = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[3][w & 0xFF] ^ crc_table[2][(w >> 8) & 0xFF] ^ crc_table[1][(w >> 16) & 0xFF] ^
              crc_table[0][w >> 24];
        p += 4;
        len -= 4;
    }
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#ifdef HAVE_CRC_FOLD
/* Whether crc_fold may run here (set once by crc_init). */

/* The CRC-32 register (pre- and post-inverted by the caller) after ``len``
 * bytes, ``len`` >= 64 and a multiple of 16: four 128-bit lanes folded by
 * carry-less multiplication, then reduced (Barrett) to 32 bits.  The method and
 * the constants (x^k mod P for the reflected zlib polynomial) are those of
 * Gopal, Ozturk et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction" (Intel, 2009), as in zlib's and Linux's x86 code. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t
crc_fold(const unsigned char *buf, size_t len, uint32_t crc)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = k1k2;
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = poly;
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* zlib.crc32(p[:len], crc): the folding code for the bulk where the CPU has it
 * (the register it starts from is ~crc), slicing by 8 for the rest. */
__attribute__((unused))
static uint32_t
crc_extend(uint32_t crc, const unsigned char *p, size_t len)
{
#ifdef HAVE_CRC_FOLD
    if (crc_fold_ok && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        crc = ~crc_fold(p, chunk, ~crc);
        return crc_update(crc, p + chunk, len - chunk);
    }
#endif
    return crc_update(crc, p, len);
}

/* CRC-32 of ``len`` bytes, exactly as zlib.crc32(bytes(p[:len])). */
__attribute__((unused))
static uint32_t
crc32_of(const unsigned char *p, size_t len)
{
    return crc_extend(0, p, len);
}

#endif /* ENGINE_CRC32_H */
