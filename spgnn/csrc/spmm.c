/* Z = A·H for a CSR A (m×k: indptr int64, indices int32 or int64, values float32 or float64) and a row-major
 * H (k×f) of the values' type: out[i] (+)= sum_p data[p]·h[indices[p]] over row i's nonzeros p. */
#include <string.h>

#include "kernels.h"

/* The first row i with indptr[i] + i >= t: work before row i, counting 1 per row and per nonzero. */
static int64_t row_at(const int64_t *indptr, int64_t m, int64_t t) {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (indptr[mid] + mid < t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

#if SPGNN_AVX512
#include <immintrin.h>

#define SPGNN_TILE 16      /* vectors of 16 floats an output row's tile holds in registers: 256 columns */
#define SPGNN_AHEAD 8      /* nonzeros ahead whose rows of h are prefetched */
#define SPGNN_BLOCK 64     /* rows whose tiles are made before the next columns: their nonzeros stay in L1 */

/* Columns [k0, k0 + 16·NV + 16·MASKED) of output rows [lo, hi), each row's in NV vector registers and a masked one
 * (loaded, or zeroed, and stored once), over the row's nonzeros: one fused multiply-add a vector per nonzero, the
 * rows SPGNN_AHEAD nonzeros on prefetched. One function for each width, never inlined, keeps the tile in registers (a
 * tile of run-time width lived on the stack, loaded and stored at every row: 20% slower at f = 256; the functions
 * inlined into the switch below lost it again). */
#define SPGNN_SPMM_TILE(NAME, IDX, NV, MASKED)                                                                   \
    __attribute__((target("avx512f"), noinline)) static void NAME(                                            \
        int64_t lo, int64_t hi, int64_t f, int64_t k0, const int64_t *indptr, const IDX *indices, const float *data, \
        const float *h, float *out, __mmask16 tail, int accumulate) {                                            \
        for (int64_t i = lo; i < hi; i++) {                                                                      \
            int64_t start = indptr[i], end = indptr[i + 1];                                                      \
            if (accumulate && start == end) continue;                  /* nothing to add (a halo block's row) */ \
            float *o = out + i * f + k0;                                                                         \
            __m512 acc[(NV) + (MASKED)];                                                                         \
            _Pragma("GCC unroll 17") for (int j = 0; j < (NV) + (MASKED); j++)                                   \
                acc[j] = !accumulate ? _mm512_setzero_ps()                                                       \
                         : j < (NV)  ? _mm512_loadu_ps(o + 16 * j)                                               \
                                     : _mm512_maskz_loadu_ps(tail, o + 16 * j);                                  \
            for (int64_t p = start; p < end; p++) {                                                              \
                const float *hp = h + (int64_t)indices[p] * f + k0;                                              \
                if (p + SPGNN_AHEAD < end) {                                                                     \
                    const char *next = (const char *)(h + (int64_t)indices[p + SPGNN_AHEAD] * f + k0);           \
                    _Pragma("GCC unroll 17") for (int j = 0; j < (NV) + (MASKED); j++)                           \
                        _mm_prefetch(next + 64 * j, _MM_HINT_T0);                                                \
                }                                                                                                \
                __m512 v = _mm512_set1_ps(data[p]);                                                              \
                _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++)                                          \
                    acc[j] = _mm512_fmadd_ps(v, _mm512_loadu_ps(hp + 16 * j), acc[j]);                           \
                if (MASKED) acc[NV] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tail, hp + 16 * (NV)), acc[NV]);  \
            }                                                                                                    \
            _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++) _mm512_storeu_ps(o + 16 * j, acc[j]);        \
            if (MASKED) _mm512_mask_storeu_ps(o + 16 * (NV), tail, acc[NV]);                                     \
        }                                                                                                        \
    }

/* The tile functions tile_TAG_NV_MASKED for indices of type IDX: every width from one masked vector to 16 whole. */
#define SPGNN_SPMM_TILES(TAG, IDX, NV) \
    SPGNN_SPMM_TILE(tile_##TAG##_##NV##_0, IDX, NV, 0) SPGNN_SPMM_TILE(tile_##TAG##_##NV##_1, IDX, NV, 1)
#define SPGNN_SPMM_ALL_TILES(TAG, IDX)                                                                           \
    SPGNN_SPMM_TILE(tile_##TAG##_0_1, IDX, 0, 1) SPGNN_SPMM_TILES(TAG, IDX, 1) SPGNN_SPMM_TILES(TAG, IDX, 2)    \
    SPGNN_SPMM_TILES(TAG, IDX, 3) SPGNN_SPMM_TILES(TAG, IDX, 4) SPGNN_SPMM_TILES(TAG, IDX, 5)                    \
    SPGNN_SPMM_TILES(TAG, IDX, 6) SPGNN_SPMM_TILES(TAG, IDX, 7) SPGNN_SPMM_TILES(TAG, IDX, 8)                    \
    SPGNN_SPMM_TILES(TAG, IDX, 9) SPGNN_SPMM_TILES(TAG, IDX, 10) SPGNN_SPMM_TILES(TAG, IDX, 11)                  \
    SPGNN_SPMM_TILES(TAG, IDX, 12) SPGNN_SPMM_TILES(TAG, IDX, 13) SPGNN_SPMM_TILES(TAG, IDX, 14)                 \
    SPGNN_SPMM_TILES(TAG, IDX, 15) SPGNN_SPMM_TILE(tile_##TAG##_16_0, IDX, 16, 0)
#define SPGNN_SPMM_CALL(TAG, NV, MASKED) \
    tile_##TAG##_##NV##_##MASKED(b, e, f, k0, indptr, indices, data, h, out, tail, accumulate)
#define SPGNN_SPMM_CASE(TAG, NV) \
    case NV: if (masked) SPGNN_SPMM_CALL(TAG, NV, 1); else SPGNN_SPMM_CALL(TAG, NV, 0); break;

/* out (+)= A·h for float32 rows [lo, hi): by blocks of SPGNN_BLOCK rows, each block's columns 256 at a time in
 * registers; each nonzero costs a load and a multiply-add per 16 columns. On a 2-core AMD EPYC, amazon-computers
 * in rcm order (491,722 nonzeros), medians of 21: f = 767, 256, 64, 10 in 10.3, 2.1, 0.45, 0.25 ms, against the
 * portable loop's 15.1, 2.9, 0.67, 0.41 and the stack-held tile's 13.0, 2.6, 0.49, 0.28 (f = 300: 3.0 against 5.3). */
#define SPGNN_SPMM_AVX512(TAG, IDX)                                                                              \
    SPGNN_SPMM_ALL_TILES(TAG, IDX)                                                                               \
    __attribute__((target("avx512f"))) static void rows_##TAG##_f32(int64_t lo, int64_t hi, int64_t f,         \
                                                                   const int64_t *indptr, const IDX *indices,  \
                                                                   const float *data, const float *h,          \
                                                                   float *out, int accumulate) {               \
        for (int64_t b = lo; b < hi; b += SPGNN_BLOCK) {                                                         \
            int64_t e = b + SPGNN_BLOCK < hi ? b + SPGNN_BLOCK : hi;                                             \
            for (int64_t k0 = 0; k0 < f; k0 += 16 * SPGNN_TILE) {                                                \
                int64_t width = f - k0 < 16 * SPGNN_TILE ? f - k0 : 16 * SPGNN_TILE;                             \
                int nv = (int)(width / 16), masked = width % 16 != 0;                                            \
                __mmask16 tail = (__mmask16)((1u << (width % 16)) - 1);                                          \
                switch (nv) {                                   /* nv = 0: masked (k0 < f), nv = 16: whole */ \
                    case 0: SPGNN_SPMM_CALL(TAG, 0, 1); break;                                                   \
                    SPGNN_SPMM_CASE(TAG, 1) SPGNN_SPMM_CASE(TAG, 2) SPGNN_SPMM_CASE(TAG, 3)                      \
                    SPGNN_SPMM_CASE(TAG, 4) SPGNN_SPMM_CASE(TAG, 5) SPGNN_SPMM_CASE(TAG, 6)                      \
                    SPGNN_SPMM_CASE(TAG, 7) SPGNN_SPMM_CASE(TAG, 8) SPGNN_SPMM_CASE(TAG, 9)                      \
                    SPGNN_SPMM_CASE(TAG, 10) SPGNN_SPMM_CASE(TAG, 11) SPGNN_SPMM_CASE(TAG, 12)                   \
                    SPGNN_SPMM_CASE(TAG, 13) SPGNN_SPMM_CASE(TAG, 14) SPGNN_SPMM_CASE(TAG, 15)                   \
                    case 16: SPGNN_SPMM_CALL(TAG, 16, 0); break;                                                 \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
    }

SPGNN_SPMM_AVX512(i32, int32_t)
SPGNN_SPMM_AVX512(i64, int64_t)
#define SPGNN_FAST_F32(IDX) (avx512 ? rows_##IDX##_f32(lo, hi, f, indptr, indices, data, h, out, accumulate), 1 : 0)
#else
#define SPGNN_FAST_F32(IDX) 0
#endif
#define SPGNN_FAST_F64(IDX) 0

/* out (+)= A·h, each thread's rows one chunk of equal nnz + rows: where FAST runs them (float32 on a CPU with
 * AVX-512), by the register tiles above; else eight nonzeros per pass over the f columns, so that the output row
 * is loaded and stored once per eight gathered rows of h (the loop over k vectorises). */
#define SPGNN_SPMM(NAME, IDX, VAL, FAST)                                                                         \
    SPGNN_CLONES void NAME(int64_t m, int64_t f, const int64_t *indptr, const IDX *indices, const VAL *data,     \
                           const VAL *h, VAL *out, int accumulate) {                                             \
        int64_t work = indptr[m] + m;                                                                            \
        int parallel = indptr[m] * f >= SPGNN_PARALLEL_WORK, avx512 = spgnn_avx512();                           \
        (void)avx512;                                                                                            \
        _Pragma("omp parallel if (parallel)") {                                                                  \
            int64_t c = omp_get_thread_num(), nchunks = omp_get_num_threads();                                   \
            int64_t lo = row_at(indptr, m, c * work / nchunks), hi = row_at(indptr, m, (c + 1) * work / nchunks); \
            if (!FAST)                                                                                           \
                for (int64_t i = lo; i < hi; i++) {                                                              \
                    VAL *restrict acc = out + i * f;                                                             \
                    if (!accumulate) memset(acc, 0, (size_t)f * sizeof(VAL));                                    \
                    int64_t p = indptr[i], end = indptr[i + 1];                                                  \
                    for (; p + 8 <= end; p += 8) {                                                               \
                        const VAL *h0 = h + indices[p] * f, *h1 = h + indices[p + 1] * f;                        \
                        const VAL *h2 = h + indices[p + 2] * f, *h3 = h + indices[p + 3] * f;                    \
                        const VAL *h4 = h + indices[p + 4] * f, *h5 = h + indices[p + 5] * f;                    \
                        const VAL *h6 = h + indices[p + 6] * f, *h7 = h + indices[p + 7] * f;                    \
                        VAL v0 = data[p], v1 = data[p + 1], v2 = data[p + 2], v3 = data[p + 3];                  \
                        VAL v4 = data[p + 4], v5 = data[p + 5], v6 = data[p + 6], v7 = data[p + 7];              \
                        for (int64_t k = 0; k < f; k++)                                                          \
                            acc[k] += ((v0 * h0[k] + v1 * h1[k]) + (v2 * h2[k] + v3 * h3[k])) +                  \
                                      ((v4 * h4[k] + v5 * h5[k]) + (v6 * h6[k] + v7 * h7[k]));                   \
                    }                                                                                            \
                    for (; p < end; p++) {                                                                       \
                        const VAL *hp = h + indices[p] * f;                                                      \
                        VAL vp = data[p];                                                                        \
                        for (int64_t k = 0; k < f; k++) acc[k] += vp * hp[k];                                    \
                    }                                                                                            \
                }                                                                                                \
        }                                                                                                        \
    }

SPGNN_SPMM(spmm_i32_f32, int32_t, float, SPGNN_FAST_F32(i32))
SPGNN_SPMM(spmm_i64_f32, int64_t, float, SPGNN_FAST_F32(i64))
SPGNN_SPMM(spmm_i32_f64, int32_t, double, SPGNN_FAST_F64(i32))
SPGNN_SPMM(spmm_i64_f64, int64_t, double, SPGNN_FAST_F64(i64))
