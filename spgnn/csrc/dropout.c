/* Dropout masks as a pure function of (key, node id, column) (`spgnn.hashing.dropout_mask`): entry (i, j) is
 * scale when fmix(s_i + (first + j + 1)·φ) >> 11 >= threshold, else 0, with s_i = fmix(key + node_i·φ). */
#include "kernels.h"

/* The m×cols out = h ⊙ mask, or the mask itself when h is NULL. */
SPGNN_CLONES void dropout(int64_t m, int64_t cols, const uint64_t *nodes, uint64_t key, uint64_t threshold,
                          float scale, uint64_t first, const float *h, float *out) {
#pragma omp parallel for if (m * cols >= SPGNN_PARALLEL_WORK)
    for (int64_t i = 0; i < m; i++) {
        uint64_t s = spgnn_fmix(key + nodes[i] * SPGNN_GOLDEN);
        float *restrict o = out + i * cols;
        for (int64_t j = 0; j < cols; j++) {
            uint64_t z = spgnn_fmix(s + (first + (uint64_t)j + 1) * SPGNN_GOLDEN);
            float keep = z >> 11 >= threshold ? scale : 0.0f;
            o[j] = h ? h[i * cols + j] * keep : keep;
        }
    }
}
