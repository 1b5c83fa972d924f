/* The minibatch samplers' kernels (`spgnn.sampling.sampler`).
 *
 * Keys: u(key, row, col) in (0, 1), splitmix64 of the triple, 53 bits (`spgnn_hash_uniform`).
 * Segmented top-k: per CSR row [a, a + deg) and its k_r = out_ptr[r+1] − out_ptr[r] ≤ deg (min(k, deg), set by
 * the caller), out[out_ptr[r] + t] for t < k_r are the positions, ascending, of the k_r smallest values of the row
 * (all of them when k_r = deg). A bounded max-heap of k_r (value, position) pairs scans the row once, O(deg·log k):
 * it starts as the first k_r values heapified, and a later value replaces the root (the largest kept) only when
 * strictly smaller. Of several values equal at the cut, which are kept follows from the heap's order (not always
 * the earliest: k = 2 of (5, 5, 1) keeps positions 1 and 2). The heap lives in the output (positions) and in a
 * scratch array of the same shape (values), so a kernel allocates nothing.
 * Row gather: Q·A for the selection Q[r, ids[r]] = 1, row r of the result a copy of row ids[r] of A.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* Restore the max-heap order of (hv, hi)[:k] below position s. */
static inline void sift_down(double *hv, int64_t *hi, int64_t s, int64_t k) {
    while (2 * s + 1 < k) {
        int64_t m = 2 * s + 1;
        if (m + 1 < k && hv[m + 1] > hv[m]) m++;
        if (hv[m] <= hv[s]) return;
        double v = hv[s];
        int64_t i = hi[s];
        hv[s] = hv[m], hi[s] = hi[m], hv[m] = v, hi[m] = i;
        s = m;
    }
}

/* (hv, hi)[:k], the values and positions 0..k−1 of a row's first k entries, made a max-heap on hv. */
static inline void heap_build(double *hv, int64_t *hi, int64_t k) {
    for (int64_t t = 0; t < k; t++) hi[t] = t;
    for (int64_t s = k / 2 - 1; s >= 0; s--) sift_down(hv, hi, s, k);
}

/* Entry t of value u offered to the heap of the k smallest so far. */
static inline void heap_offer(double *hv, int64_t *hi, int64_t k, double u, int64_t t) {
    if (u < hv[0]) {
        hv[0] = u, hi[0] = t;
        sift_down(hv, hi, 0, k);
    }
}

static int ascending(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The heap's positions sorted ascending and offset by the row's start a. */
static inline void heap_positions(int64_t *hi, int64_t k, int64_t a) {
    qsort(hi, (size_t)k, sizeof *hi, ascending);
    for (int64_t t = 0; t < k; t++) hi[t] += a;
}

/* out[o : o + deg] = a, a+1, … (a row no longer than its k: all of it). */
static inline void take_all(int64_t *out, int64_t a, int64_t deg) {
    for (int64_t t = 0; t < deg; t++) out[t] = a + t;
}

/* out[i] = u(keys[i], rows[i], cols[i]), i < n. */
SPGNN_CLONES void uniform_keys(int64_t n, const uint64_t *keys, const int64_t *rows, const int64_t *cols,
                               double *out) {
#pragma omp parallel for if (n >= SPGNN_PARALLEL_WORK)
    for (int64_t i = 0; i < n; i++) out[i] = spgnn_hash_uniform(keys[i], rows[i], cols[i]);
}

/* The segmented top-k of keys over the CSR rows r < m (indptr: m+1), into out (positions into keys) with scratch
 * heap (both out_ptr[m] long). */
void segmented_topk(int64_t m, const int64_t *indptr, const double *keys, const int64_t *out_ptr, double *heap,
                    int64_t *out) {
#pragma omp parallel for if (indptr[m] >= SPGNN_PARALLEL_WORK)
    for (int64_t r = 0; r < m; r++) {
        int64_t a = indptr[r], deg = indptr[r + 1] - a, o = out_ptr[r], k = out_ptr[r + 1] - o;
        if (k >= deg) {
            take_all(out + o, a, deg);
        } else if (k > 0) {
            double *hv = heap + o;
            for (int64_t t = 0; t < k; t++) hv[t] = keys[a + t];
            heap_build(hv, out + o, k);
            for (int64_t t = k; t < deg; t++) heap_offer(hv, out + o, k, keys[a + t], t);
            heap_positions(out + o, k, a);
        }
    }
}

/* The fused keys and top-k of the sampler: frontier position r < nrows reads CSR row
 * rows[r] (indptr int64, indices IDX) and keeps, into out[out_ptr[r] …] (positions into indices), its
 * out_ptr[r+1] − out_ptr[r] entries of smallest u(row_keys[r], row_ids[r], column); heap: scratch of out's shape. */
#define SPGNN_UNIFORM_TOPK(NAME, IDX)                                                                            \
    SPGNN_CLONES void NAME(int64_t nrows, const int64_t *indptr, const IDX *indices, const int64_t *rows,        \
                           const uint64_t *row_keys, const int64_t *row_ids, const int64_t *out_ptr,             \
                           double *heap, int64_t *out) {                                                         \
        int parallel = out_ptr[nrows] >= SPGNN_PARALLEL_WORK;                                                    \
        _Pragma("omp parallel for if (parallel)")                                                                \
        for (int64_t r = 0; r < nrows; r++) {                                                                    \
            int64_t a = indptr[rows[r]], deg = indptr[rows[r] + 1] - a, o = out_ptr[r], k = out_ptr[r + 1] - o;  \
            uint64_t key = row_keys[r];                                                                          \
            int64_t id = row_ids[r];                                                                             \
            if (k >= deg) {                                                                                      \
                take_all(out + o, a, deg);                                                                       \
            } else if (k > 0) {                                                                                  \
                double *hv = heap + o;                                                                           \
                for (int64_t t = 0; t < k; t++) hv[t] = spgnn_hash_uniform(key, id, (int64_t)indices[a + t]);    \
                heap_build(hv, out + o, k);                                                                      \
                for (int64_t t = k; t < deg; t++)                                                                \
                    heap_offer(hv, out + o, k, spgnn_hash_uniform(key, id, (int64_t)indices[a + t]), t);         \
                heap_positions(out + o, k, a);                                                                   \
            }                                                                                                    \
        }                                                                                                        \
    }

SPGNN_UNIFORM_TOPK(uniform_topk_i32, int32_t)
SPGNN_UNIFORM_TOPK(uniform_topk_i64, int64_t)

/* The row gather: result row r < nids is row ids[r] of A (indptr int64, indices IDX, values
 * of itemsize bytes each), written at out_ptr[r] of out_indices (int64) and out_data (A's value type). */
#define SPGNN_SELECT_ROWS(NAME, IDX)                                                                             \
    void NAME(int64_t nids, int64_t itemsize, const int64_t *indptr, const IDX *indices, const char *data,       \
              const int64_t *ids, const int64_t *out_ptr, int64_t *out_indices, char *out_data) {                \
        int parallel = out_ptr[nids] >= SPGNN_PARALLEL_WORK;                                                     \
        _Pragma("omp parallel for if (parallel)")                                                                \
        for (int64_t r = 0; r < nids; r++) {                                                                     \
            int64_t a = indptr[ids[r]], deg = indptr[ids[r] + 1] - a, o = out_ptr[r];                            \
            for (int64_t t = 0; t < deg; t++) out_indices[o + t] = (int64_t)indices[a + t];                      \
            memcpy(out_data + o * itemsize, data + a * itemsize, (size_t)(deg * itemsize));                      \
        }                                                                                                        \
    }

SPGNN_SELECT_ROWS(select_rows_i32, int32_t)
SPGNN_SELECT_ROWS(select_rows_i64, int64_t)
