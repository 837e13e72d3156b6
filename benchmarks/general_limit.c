/* Physical-limit reference for the general-size engine (sim/dispatch/general.py): power-of-d,
   N FIFO servers, Poisson(lambda*N) arrivals, Exp(1) sizes drawn at arrival, the same chain as
   the engine's lazy loop: each server keeps a ring of the completion times of its tasks and
   its last completion; d distinct servers are sampled (rejection of repeats), each sampled
   ring drops its completions <= t and the shortest queue takes the task, whose wait is the
   work ahead of it. Estimates the mean response (per task, the first 10% of arrivals cut);
   no windows, tails or second moments.
   Build: gcc -O3 -march=native -o general_limit general_limit.c -lm
   Run:   ./general_limit N lambda d jobs seed  */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <math.h>
static uint64_t s[4];
static inline uint64_t rotl(const uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t next(void) {            /* xoshiro256+ */
  const uint64_t r = s[0] + s[3], t = s[1] << 17;
  s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
  return r;
}
static inline double open_unit(void) { return (double)((1ULL << 53) - (next() >> 11)) * 0x1.0p-53; }
static inline uint32_t below(uint32_t n) { return (uint32_t)(((next() >> 32) * (uint64_t)n) >> 32); }
int main(int argc, char **argv) {
  uint32_t N = argc > 1 ? atoi(argv[1]) : 10000; double lam = argc > 2 ? atof(argv[2]) : 0.9;
  int d = argc > 3 ? atoi(argv[3]) : 2; uint64_t J = argc > 4 ? strtoull(argv[4], 0, 10) : 10000000ULL;
  uint64_t seed = argc > 5 ? strtoull(argv[5], 0, 10) : 1;
  for (int i = 0; i < 4; i++) { seed += 0x9E3779B97F4A7C15ULL; uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL; z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL; s[i] = z ^ (z >> 31); }
  uint32_t C = 16, mask = C - 1;
  double *ring = calloc((size_t)N * C, sizeof *ring), *clast = calloc(N, sizeof *clast);
  uint32_t *head = calloc(N, sizeof *head), *q = calloc(N, sizeof *q), samp[64];
  const double rate = lam * N; const uint64_t warm = J / 10;
  double t = 0, sum_resp = 0;
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (uint64_t j = 0; j < J; j++) {
    t -= log(open_unit()) / rate;
    uint32_t best = 0, bq = UINT32_MAX;
    for (int k = 0; k < d; k++) {
      uint32_t c; int dup;
      do { c = below(N); dup = 0; for (int i = 0; i < k; i++) if (samp[i] == c) { dup = 1; break; } } while (dup);
      samp[k] = c;
      uint32_t h = head[c], l = q[c];              /* lazy read: drop completions <= t */
      while (l > 0 && ring[(size_t)c * C + h] <= t) { h = (h + 1) & mask; l--; }
      head[c] = h; q[c] = l;
      if (l < bq) { bq = l; best = c; }
    }
    double size = -log(open_unit()), wait = clast[best] > t ? clast[best] - t : 0.0;
    double own = t + wait + size;
    if (q[best] + 1 == C) {                        /* grow every ring (unrolled to slot 0) */
      uint32_t C2 = 2 * C; double *r2 = calloc((size_t)N * C2, sizeof *r2);
      for (uint32_t n = 0; n < N; n++) { for (uint32_t i = 0; i < q[n]; i++) r2[(size_t)n * C2 + i] = ring[(size_t)n * C + ((head[n] + i) & mask)]; head[n] = 0; }
      free(ring); ring = r2; C = C2; mask = C - 1;
    }
    ring[(size_t)best * C + ((head[best] + q[best]) & mask)] = own; q[best]++; clast[best] = own;
    if (j >= warm) sum_resp += wait + size;
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double sec = (b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec);
  printf("N=%u lambda=%g d=%d jobs=%llu seconds=%.3f jobs_per_s=%.3e mean_response=%.5f\n",
         N, lam, d, (unsigned long long)J, sec, J / sec, sum_resp / (double)(J - warm));
  return 0;
}
