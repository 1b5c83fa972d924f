/* Graph attention's weighted sum over an edge list e = (cols[e] -> rows[e]) with H heads of F features:
 * out[rows[e], h, :] += p[e, h]·v[cols[e], h, :], and its adjoints (`spgnn.sparse.attention.weighted_sum`).
 * Serial: rows (and cols) may repeat. */
#include "kernels.h"

#define SPGNN_WEIGHTED_SUM(NAME, VAL)                                                                            \
    SPGNN_CLONES void NAME(int64_t nnz, int64_t heads, int64_t f, const VAL *p, const int64_t *rows,             \
                           const int64_t *cols, const VAL *v, VAL *out) {                                        \
        for (int64_t e = 0; e < nnz; e++)                                                                        \
            for (int64_t h = 0; h < heads; h++) {                                                                \
                VAL w = p[e * heads + h];                                                                        \
                VAL *o = out + (rows[e] * heads + h) * f;                                                        \
                const VAL *x = v + (cols[e] * heads + h) * f;                                                    \
                for (int64_t k = 0; k < f; k++) o[k] += w * x[k];                                                \
            }                                                                                                    \
    }

/* For out's gradient g: dp[e, h] = <g[rows[e], h], v[cols[e], h]> (summed in double) and
 * dv[cols[e], h, :] += p[e, h]·g[rows[e], h, :]. */
#define SPGNN_WEIGHTED_SUM_GRAD(NAME, VAL)                                                                       \
    SPGNN_CLONES void NAME(int64_t nnz, int64_t heads, int64_t f, const VAL *p, const int64_t *rows,             \
                           const int64_t *cols, const VAL *v, const VAL *g, VAL *dp, VAL *dv) {                  \
        for (int64_t e = 0; e < nnz; e++)                                                                        \
            for (int64_t h = 0; h < heads; h++) {                                                                \
                VAL w = p[e * heads + h];                                                                        \
                double acc = 0;                                                                                  \
                const VAL *gi = g + (rows[e] * heads + h) * f, *x = v + (cols[e] * heads + h) * f;               \
                VAL *d = dv + (cols[e] * heads + h) * f;                                                         \
                for (int64_t k = 0; k < f; k++) {                                                                \
                    acc += gi[k] * x[k];                                                                         \
                    d[k] += w * gi[k];                                                                           \
                }                                                                                                \
                dp[e * heads + h] = (VAL)acc;                                                                    \
            }                                                                                                    \
    }

SPGNN_WEIGHTED_SUM(weighted_sum_f32, float)
SPGNN_WEIGHTED_SUM(weighted_sum_f64, double)
SPGNN_WEIGHTED_SUM_GRAD(weighted_sum_grad_f32, float)
SPGNN_WEIGHTED_SUM_GRAD(weighted_sum_grad_f64, double)
