/* One-pass streaming partitioning (`spgnn.partition.streaming`): vertex v = verts[t], in turn, goes to the part p
 * with room (|S_p| < C) of the highest score, with N_p its neighbours already in part p,
 *
 *     LDG (kind 0)     N_p · (1 − |S_p| / C)
 *     Fennel (kind 1)  N_p − α·γ·|S_p|^(γ−1)
 *
 * ties to the smaller part, then the lower id. All in double, in this order of operations. */
#include <math.h>

#include "kernels.h"

/* Place verts[0 .. nverts) in turn (neighbours of verts[t]: indices[indptr[rows[t]] .. indptr[rows[t]+1])),
 * updating parts (n, −1: not yet placed) and sizes (P) in place; neigh: P doubles of scratch. */
void stream_partition(int64_t nverts, const int64_t *indptr, const int64_t *indices, const int64_t *verts,
                      const int64_t *rows, int64_t *parts, int64_t *sizes, int64_t P, int64_t capacity, int64_t kind,
                      double alpha, double gamma, double *neigh) {
    for (int64_t t = 0; t < nverts; t++) {
        int64_t v = verts[t], r = rows[t];
        for (int64_t p = 0; p < P; p++) neigh[p] = 0.0;
        for (int64_t e = indptr[r]; e < indptr[r + 1]; e++) {
            int64_t p = parts[indices[e]];
            if (p >= 0) neigh[p] += 1.0;
        }
        int64_t best = -1;
        double best_score = 0.0;
        for (int64_t p = 0; p < P; p++) {
            if (sizes[p] >= capacity) continue;
            double score = kind == 0 ? neigh[p] * (1.0 - (double)sizes[p] / (double)capacity)
                                     : neigh[p] - alpha * gamma * pow((double)sizes[p], gamma - 1.0);
            if (best < 0 || score > best_score || (score == best_score && sizes[p] < sizes[best]))
                best = p, best_score = score;
        }
        parts[v] = best;
        if (best >= 0) sizes[best]++;
    }
}
