/* Shared by spgnn's C kernels: splitmix64 hashing, how a parallel kernel finds its share of the work, and the
 * CPU variants each hot loop is built for.
 *
 * A parallel kernel is one OpenMP parallel region (when its work is at least SPGNN_PARALLEL_WORK elements: below
 * that a thread costs more than it saves), in which each thread does its own chunk of rows and writes only those.
 * The library links libgomp.so.1, the OpenMP runtime torch loads: the kernels run on torch's threads, as many as
 * torch.set_num_threads says, and never compete with a second pool of them.
 */
#ifndef SPGNN_KERNELS_H
#define SPGNN_KERNELS_H

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SPGNN_PARALLEL_WORK (1 << 15)

/* One build runs at its best on any x86-64 CPU: gcc compiles the loop for AVX-512, AVX2 and the baseline, and the
 * loader picks the one the CPU has (an ifunc). Elsewhere, the compiler's default target. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define SPGNN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPGNN_CLONES
#endif

/* A kernel written for AVX-512 (intrinsics, compiled for it alone) where gcc builds for x86-64; it runs where
 * spgnn_avx512() says the CPU has it, the portable loop elsewhere. SPGNN_NO_AVX512 set in the environment (to
 * anything but "" or "0") turns it off, to compare the two. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPGNN_AVX512 1
#else
#define SPGNN_AVX512 0
#endif

static inline int spgnn_avx512(void) {
#if SPGNN_AVX512
    static int has = -1;
    if (has < 0) {
        const char *off = getenv("SPGNN_NO_AVX512");
        has = __builtin_cpu_supports("avx512f") && !(off && *off && strcmp(off, "0"));
    }
    return has;
#else
    return 0;
#endif
}

#define SPGNN_GOLDEN 0x9E3779B97F4A7C15ULL

/* splitmix64's finaliser. */
static inline uint64_t spgnn_fmix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* u in (0, 1): splitmix64 of (key, row, col), 53 bits (`spgnn.hashing.hash_uniform_array`). */
static inline double spgnn_hash_uniform(uint64_t key, int64_t row, int64_t col) {
    uint64_t z = spgnn_fmix(spgnn_fmix(key + (uint64_t)row * SPGNN_GOLDEN) + ((uint64_t)col + 1) * SPGNN_GOLDEN);
    return ((double)(z >> 11) + 0.5) * 0x1p-53;
}

#endif
