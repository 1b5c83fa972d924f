/* A transposed copy: dst (c×r, row-major) = srcᵀ for a float32 src of r rows and c columns, rows ld apart
 * (`spgnn.dense.transposed`: the first operand of oneDNN's weight-gradient product, which takes it contiguous). */
#include "kernels.h"

#define SPGNN_TILE 16

/* Tiles of 16×16: a tile's rows of src and of dst each stay in cache while it is copied. Threads take the columns
 * of src (rows of dst) in runs of tiles. */
SPGNN_CLONES void transpose_f32(int64_t r, int64_t c, int64_t ld, const float *src, float *dst) {
#pragma omp parallel for schedule(static) if (r * c >= SPGNN_PARALLEL_WORK)
    for (int64_t j0 = 0; j0 < c; j0 += SPGNN_TILE) {
        int64_t j1 = j0 + SPGNN_TILE < c ? j0 + SPGNN_TILE : c;
        for (int64_t i0 = 0; i0 < r; i0 += SPGNN_TILE) {
            int64_t i1 = i0 + SPGNN_TILE < r ? i0 + SPGNN_TILE : r;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++) dst[j * r + i] = src[i * ld + j];
        }
    }
}
