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

/* out (+)= A·h, each thread's rows one chunk of equal nnz + rows. Eight nonzeros per pass over the f columns, so
 * that the output row is loaded and stored once per eight gathered rows of h (the loop over k vectorises). */
#define SPGNN_SPMM(NAME, IDX, VAL)                                                                               \
    SPGNN_CLONES void NAME(int64_t m, int64_t f, const int64_t *indptr, const IDX *indices, const VAL *data,     \
                           const VAL *h, VAL *out, int accumulate) {                                             \
        int64_t work = indptr[m] + m;                                                                            \
        int parallel = indptr[m] * f >= SPGNN_PARALLEL_WORK;                                                     \
        _Pragma("omp parallel if (parallel)") {                                                                  \
            int64_t c = omp_get_thread_num(), nchunks = omp_get_num_threads();                                   \
            int64_t lo = row_at(indptr, m, c * work / nchunks), hi = row_at(indptr, m, (c + 1) * work / nchunks); \
            for (int64_t i = lo; i < hi; i++) {                                                                  \
                VAL *restrict acc = out + i * f;                                                                 \
                if (!accumulate) memset(acc, 0, (size_t)f * sizeof(VAL));                                        \
                int64_t p = indptr[i], end = indptr[i + 1];                                                      \
                for (; p + 8 <= end; p += 8) {                                                                   \
                    const VAL *h0 = h + indices[p] * f, *h1 = h + indices[p + 1] * f;                            \
                    const VAL *h2 = h + indices[p + 2] * f, *h3 = h + indices[p + 3] * f;                        \
                    const VAL *h4 = h + indices[p + 4] * f, *h5 = h + indices[p + 5] * f;                        \
                    const VAL *h6 = h + indices[p + 6] * f, *h7 = h + indices[p + 7] * f;                        \
                    VAL v0 = data[p], v1 = data[p + 1], v2 = data[p + 2], v3 = data[p + 3];                      \
                    VAL v4 = data[p + 4], v5 = data[p + 5], v6 = data[p + 6], v7 = data[p + 7];                  \
                    for (int64_t k = 0; k < f; k++)                                                              \
                        acc[k] += ((v0 * h0[k] + v1 * h1[k]) + (v2 * h2[k] + v3 * h3[k])) +                      \
                                  ((v4 * h4[k] + v5 * h5[k]) + (v6 * h6[k] + v7 * h7[k]));                       \
                }                                                                                                \
                for (; p < end; p++) {                                                                           \
                    const VAL *hp = h + indices[p] * f;                                                          \
                    VAL vp = data[p];                                                                            \
                    for (int64_t k = 0; k < f; k++) acc[k] += vp * hp[k];                                        \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
    }

SPGNN_SPMM(spmm_i32_f32, int32_t, float)
SPGNN_SPMM(spmm_i64_f32, int64_t, float)
SPGNN_SPMM(spmm_i32_f64, int32_t, double)
SPGNN_SPMM(spmm_i64_f64, int64_t, double)
