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

/* Columns [k0, k0 + 16·NV + 16·MASKED) of output row i, in NV vector registers and a masked one, over the row's
 * nonzeros: one fused multiply-add a vector per nonzero, the rows SPGNN_AHEAD nonzeros on prefetched. */
#define SPGNN_SPMM_TILE(NV, MASKED)                                                                              \
    for (int64_t p = start; p < end; p++) {                                                                      \
        const float *hp = h + (int64_t)indices[p] * f + k0;                                                      \
        if (p + SPGNN_AHEAD < end) {                                                                             \
            const char *next = (const char *)(h + (int64_t)indices[p + SPGNN_AHEAD] * f + k0);                   \
            for (int j = 0; j < (NV) + (MASKED); j++) _mm_prefetch(next + 64 * j, _MM_HINT_T0);                  \
        }                                                                                                        \
        __m512 v = _mm512_set1_ps(data[p]);                                                                      \
        _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++)                                                  \
            acc[j] = _mm512_fmadd_ps(v, _mm512_loadu_ps(hp + 16 * j), acc[j]);                                   \
        if (MASKED) acc[NV] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(tail, hp + 16 * (NV)), acc[NV]);          \
    }

#define SPGNN_SPMM_CASE(NV) \
    case NV: if (masked) { SPGNN_SPMM_TILE(NV, 1) } else { SPGNN_SPMM_TILE(NV, 0) } break;

/* out (+)= A·h for float32 rows [lo, hi), each output row's columns 256 at a time in registers: its tile is
 * loaded (or zeroed) and stored once, and each nonzero costs a load and a multiply-add per 16 columns. On a 2-core
 * AMD EPYC, amazon-computers (491,722 nonzeros) at f = 256, 64, 10: 2.5, 0.46, 0.28 ms against the portable loop's
 * 3.4, 0.66, 0.43. */
#define SPGNN_SPMM_AVX512(NAME, IDX)                                                                             \
    __attribute__((target("avx512f"))) static void NAME(int64_t lo, int64_t hi, int64_t f, const int64_t *indptr, \
                                                       const IDX *indices, const float *data, const float *h,     \
                                                       float *out, int accumulate) {                             \
        for (int64_t i = lo; i < hi; i++) {                                                                      \
            int64_t start = indptr[i], end = indptr[i + 1];                                                      \
            if (accumulate && start == end) continue;                  /* nothing to add (a halo block's row) */ \
            for (int64_t k0 = 0; k0 < f; k0 += 16 * SPGNN_TILE) {                                                \
                int64_t width = f - k0 < 16 * SPGNN_TILE ? f - k0 : 16 * SPGNN_TILE;                             \
                int nv = (int)(width / 16), masked = width % 16 != 0;                                            \
                __mmask16 tail = (__mmask16)((1u << (width % 16)) - 1);                                          \
                float *o = out + i * f + k0;                                                                     \
                __m512 acc[SPGNN_TILE + 1];                                                                      \
                for (int j = 0; j < nv + masked; j++)                                                            \
                    acc[j] = !accumulate ? _mm512_setzero_ps()                                                   \
                             : j < nv    ? _mm512_loadu_ps(o + 16 * j)                                           \
                                         : _mm512_maskz_loadu_ps(tail, o + 16 * j);                              \
                switch (nv) {                                                                                    \
                    SPGNN_SPMM_CASE(0) SPGNN_SPMM_CASE(1) SPGNN_SPMM_CASE(2) SPGNN_SPMM_CASE(3)                  \
                    SPGNN_SPMM_CASE(4) SPGNN_SPMM_CASE(5) SPGNN_SPMM_CASE(6) SPGNN_SPMM_CASE(7)                  \
                    SPGNN_SPMM_CASE(8) SPGNN_SPMM_CASE(9) SPGNN_SPMM_CASE(10) SPGNN_SPMM_CASE(11)                \
                    SPGNN_SPMM_CASE(12) SPGNN_SPMM_CASE(13) SPGNN_SPMM_CASE(14) SPGNN_SPMM_CASE(15)              \
                    SPGNN_SPMM_CASE(16)                                                                          \
                }                                                                                                \
                for (int j = 0; j < nv; j++) _mm512_storeu_ps(o + 16 * j, acc[j]);                               \
                if (masked) _mm512_mask_storeu_ps(o + 16 * nv, tail, acc[nv]);                                   \
            }                                                                                                    \
        }                                                                                                        \
    }

SPGNN_SPMM_AVX512(rows_i32_f32, int32_t)
SPGNN_SPMM_AVX512(rows_i64_f32, int64_t)
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
