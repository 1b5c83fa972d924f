/* Graph attention's sums over an edge list e = (cols[e] -> rows[e]): the weighted sum of H heads of F features,
 * out[rows[e], h, :] += p[e, h]·v[cols[e], h, :], and its adjoints (`spgnn.sparse.attention.weighted_sum`); the sum
 * and the maximum of w values an edge into each row, out[rows[e], :] += x[e, :] and out[rows[e], :] max= x[e, :]
 * (`spgnn.sparse.segment`: the softmax's row sums and maxima, and the adjoint of gathering rows by index).
 *
 * Rows (and cols) may repeat and come in any order. A sum into a row of out (or of dv) is made by one thread, the
 * row's owner, over the edges in their order, so the result is the serial loop's whatever the number of threads:
 * each thread owns a run of rows holding about an equal share of the edges (`owned`, from a sample), scans every
 * edge's index and takes the edges into its rows. The scan costs a thread 8 bytes an edge against the H·F
 * multiply-adds of the edges it takes. An index out of range (a row outside [0, n), a column outside [0, n_src))
 * costs a compare: its edge is skipped, never written or read through, and the kernel returns how many it saw
 * (0 when none; the caller raises). On 2 threads, 505,000 edges sorted by row, 8 heads of 64: forward 21-25 ms
 * against the serial loop's 48, backward below. */
#include "kernels.h"

#define SPGNN_MAX_THREADS 1024
#define SPGNN_SAMPLES 64        /* edges a thread's share is sampled by */

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* bounds[c], bounds[c + 1]: the rows [0, n) of `idx` (nnz row indices) that thread c of t owns, each run about
 * nnz / t edges: the quantiles of SPGNN_SAMPLES·t edges evenly spaced. One thread (bounds 0, n) when the work is
 * below SPGNN_PARALLEL_WORK. Returns t. */
static int owned(int64_t nnz, int64_t work, const int64_t *idx, int64_t n, int64_t *bounds) {
    int t = work < SPGNN_PARALLEL_WORK ? 1 : omp_get_max_threads() < SPGNN_MAX_THREADS ? omp_get_max_threads()
                                                                                   : SPGNN_MAX_THREADS;
    int64_t k = (int64_t)SPGNN_SAMPLES * t, *sample = t > 1 ? malloc((size_t)k * sizeof(int64_t)) : NULL;
    bounds[0] = 0;
    for (int c = 1; c <= t; c++) bounds[c] = n;
    if (!sample) return 1;
    for (int64_t j = 0; j < k; j++) sample[j] = idx[(int64_t)((double)nnz * j / k)];
    qsort(sample, (size_t)k, sizeof(int64_t), by_value);
    for (int c = 1; c < t; c++) {                             /* clamped to [0, n]: out-of-range samples own nothing */
        int64_t b = sample[c * SPGNN_SAMPLES];
        bounds[c] = b < 0 ? 0 : b > n ? n : b;
    }
    free(sample);
    return t;
}

/* The rows [lo, hi) of each run this thread owns: run c is thread c's, or c mod the team's size where the runtime
 * gave fewer threads than asked. */
#define SPGNN_OWN(T, BOUNDS, LO, HI)                                                                             \
    for (int64_t c = omp_get_thread_num(), LO, HI; c < (T) && (LO = (BOUNDS)[c], HI = (BOUNDS)[c + 1], 1);       \
         c += omp_get_num_threads())

/* Whether i lies outside [0, n). */
#define SPGNN_OUTSIDE(I, N) ((uint64_t)(I) >= (uint64_t)(N))

/* The edges e of [0, nnz), in order, whose idx[e] lies in a run of rows this thread owns (the statement after it);
 * each idx[e] outside [0, N), in no run, adds 1 to BAD (on every run's scan). */
#define SPGNN_OWNED_EDGES(T, BOUNDS, IDX, NNZ, N, BAD, E)                                                        \
    SPGNN_OWN(T, BOUNDS, lo, hi) for (int64_t E = 0; E < (NNZ); E++)                                             \
        if ((IDX)[E] < lo || (IDX)[E] >= hi) BAD += SPGNN_OUTSIDE((IDX)[E], N); else

/* out (n×heads×f) += the edges' p·v for v n_src×heads×f; returns the rows and cols outside seen (0: none). */
#define SPGNN_WEIGHTED_SUM(NAME, VAL)                                                                            \
    SPGNN_CLONES int64_t NAME(int64_t nnz, int64_t heads, int64_t f, int64_t n, int64_t n_src, const VAL *p,     \
                              const int64_t *rows, const int64_t *cols, const VAL *v, VAL *out) {                \
        int64_t bounds[SPGNN_MAX_THREADS + 1], bad = 0;                                                          \
        int t = owned(nnz, nnz * heads * f, rows, n, bounds);                                                    \
        _Pragma("omp parallel num_threads(t) if (t > 1) reduction(+ : bad)") {                                   \
            SPGNN_OWNED_EDGES(t, bounds, rows, nnz, n, bad, e) {                                                 \
                if (SPGNN_OUTSIDE(cols[e], n_src)) {                                                             \
                    bad++;                                                                                       \
                    continue;                                                                                    \
                }                                                                                                \
                for (int64_t h = 0; h < heads; h++) {                                                            \
                    VAL w = p[e * heads + h];                                                                    \
                    VAL *o = out + (rows[e] * heads + h) * f;                                                    \
                    const VAL *x = v + (cols[e] * heads + h) * f;                                                \
                    for (int64_t k = 0; k < f; k++) o[k] += w * x[k];                                            \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        return bad;                                                                                              \
    }

/* For out's gradient g: dp[e, h] = <g[rows[e], h], v[cols[e], h]> (each edge's own, in parallel over the edges;
 * the sum in double, its lanes added in any order), then dv[cols[e], h, :] += p[e, h]·g[rows[e], h, :] by the
 * owners of v's rows; indices out of range skipped and counted as in the forward. On 2 threads, 505,000 edges, 8
 * heads of 64: 67 ms against 85-90 with both in the owners' one pass, and 309 for the serial loop. */
#define SPGNN_WEIGHTED_SUM_GRAD(NAME, VAL)                                                                       \
    SPGNN_CLONES int64_t NAME(int64_t nnz, int64_t heads, int64_t f, int64_t n, int64_t n_src, const VAL *p,     \
                              const int64_t *rows, const int64_t *cols, const VAL *v, const VAL *g, VAL *dp,     \
                              VAL *dv) {                                                                         \
        int64_t bounds[SPGNN_MAX_THREADS + 1], bad = 0;                                                          \
        int t = owned(nnz, nnz * heads * f, cols, n_src, bounds);                                                \
        _Pragma("omp parallel num_threads(t) if (t > 1) reduction(+ : bad)") {                                   \
            _Pragma("omp for schedule(static)") for (int64_t e = 0; e < nnz; e++) {                              \
                if (SPGNN_OUTSIDE(rows[e], n) || SPGNN_OUTSIDE(cols[e], n_src)) {                                \
                    bad++;                                                                                       \
                    continue;                                                                                    \
                }                                                                                                \
                for (int64_t h = 0; h < heads; h++) {                                                            \
                    const VAL *gi = g + (rows[e] * heads + h) * f, *x = v + (cols[e] * heads + h) * f;           \
                    double acc = 0;                                                                              \
                    _Pragma("omp simd reduction(+ : acc)") for (int64_t k = 0; k < f; k++) acc += gi[k] * x[k]; \
                    dp[e * heads + h] = (VAL)acc;                                                                \
                }                                                                                                \
            }                                                                                                    \
            SPGNN_OWNED_EDGES(t, bounds, cols, nnz, n_src, bad, e) {                                             \
                if (SPGNN_OUTSIDE(rows[e], n)) continue;                                  /* counted above */    \
                for (int64_t h = 0; h < heads; h++) {                                                            \
                    VAL w = p[e * heads + h];                                                                    \
                    const VAL *gi = g + (rows[e] * heads + h) * f;                                               \
                    VAL *d = dv + (cols[e] * heads + h) * f;                                                     \
                    for (int64_t k = 0; k < f; k++) d[k] += w * gi[k];                                           \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        return bad;                                                                                              \
    }

SPGNN_WEIGHTED_SUM(weighted_sum_f32, float)
SPGNN_WEIGHTED_SUM(weighted_sum_f64, double)
SPGNN_WEIGHTED_SUM_GRAD(weighted_sum_grad_f32, float)
SPGNN_WEIGHTED_SUM_GRAD(weighted_sum_grad_f64, double)

/* out[rows[e], :] (+= or max=) x[e, :] for x nnz×w, out n×w as the caller set it (zeros, −inf), by the owners of
 * out's rows over the edges in their order: the sums are torch's serial index_add_'s, bit for bit. The maximum
 * keeps a NaN as torch's scatter_reduce_("amax") does. Returns the rows outside [0, n) seen (0: none). */
#define SPGNN_SEGMENT(NAME, VAL, COMBINE)                                                                        \
    SPGNN_CLONES int64_t NAME(int64_t nnz, int64_t w, int64_t n, const int64_t *rows, const VAL *x, VAL *out) {  \
        int64_t bounds[SPGNN_MAX_THREADS + 1], bad = 0;                                                          \
        int t = owned(nnz, nnz * w, rows, n, bounds);                                                            \
        _Pragma("omp parallel num_threads(t) if (t > 1) reduction(+ : bad)") {                                   \
            SPGNN_OWNED_EDGES(t, bounds, rows, nnz, n, bad, e) {                                                 \
                VAL *o = out + rows[e] * w;                                                                      \
                const VAL *s = x + e * w;                                                                        \
                for (int64_t k = 0; k < w; k++) COMBINE(o[k], s[k]);                                             \
            }                                                                                                    \
        }                                                                                                        \
        return bad;                                                                                              \
    }
#define SPGNN_ADD(O, S) O += S
#define SPGNN_MAX(O, S) O = S > O || S != S ? S : O

SPGNN_SEGMENT(segment_sum_f32, float, SPGNN_ADD)
SPGNN_SEGMENT(segment_sum_f64, double, SPGNN_ADD)
SPGNN_SEGMENT(segment_max_f32, float, SPGNN_MAX)
SPGNN_SEGMENT(segment_max_f64, double, SPGNN_MAX)
