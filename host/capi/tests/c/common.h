/* Helpers shared by the C ABI test programs (the .c files next to it): failure reporting, a
 * watchdog, random data, the element formats (float16 and bfloat16 written out here) and the
 * reduction reference. C99 + libc + pthreads only (no libm: the programs link with
 * -lnccl -lpthread and nothing else).
 *
 * On oxccl's CPU backend (OXCCL_BACKEND=cpu) "device memory" is host memory and the stream
 * is ignored, so the programs pass malloc'd buffers and a null stream, and read results right
 * after the call (or after the outermost ncclGroupEnd). */
#ifndef OXCCL_CTEST_COMMON_H
#define OXCCL_CTEST_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

/* The stream argument: ignored on the CPU backend. */
#define STREAM ((cudaStream_t)0)

#define MAX_RANKS 8
/* Bytes past the end of every buffer, poisoned and checked untouched. */
#define GUARD 64
#define POISON 0xff

static const char *g_prog = "ctest";

/* What each rank is doing, for the watchdog's message (diagnostics only). */
static char g_stage[MAX_RANKS + 1][160];

static inline void set_stage(int rank, const char *fmt, ...) {
  int slot = (rank >= 0 && rank < MAX_RANKS) ? rank : MAX_RANKS;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_stage[slot], sizeof g_stage[slot], fmt, ap);
  va_end(ap);
}

/* Print "prog: rank R: message" and end the whole process with status 1 (other ranks would
 * otherwise wait for this one forever). _exit: no atexit handlers or library destructors
 * run while other threads are still inside the library. Only the first failing thread
 * reports. */
static inline void fail(int rank, const char *fmt, ...) {
  static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
  va_list ap;
  pthread_mutex_lock(&once); /* the first failure is reported; later ones wait for _exit */
  fflush(stdout);
  if (rank >= 0)
    fprintf(stderr, "%s: FAIL rank %d: ", g_prog, rank);
  else
    fprintf(stderr, "%s: FAIL: ", g_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
  _exit(1);
}

static inline const char *last_error(ncclComm_t comm) {
  const char *m = ncclGetLastError(comm);
  return m ? m : "(null)";
}

/* Call an NCCL function; anything but ncclSuccess fails the rank with the call, the code,
 * its string and ncclGetLastError. */
#define CHECK(rank, comm, call)                                                              \
  do {                                                                                       \
    ncclResult_t res_ = (call);                                                              \
    if (res_ != ncclSuccess)                                                                 \
      fail((rank), "%s:%d: %s returned %d (%s); last error: %s", __FILE__, __LINE__, #call,  \
           (int)res_, ncclGetErrorString(res_), last_error(comm));                           \
  } while (0)

/* Expect a non-success code: `call` must return `want` (or one of want/want2). */
#define EXPECT_CODE2(rank, comm, call, want, want2)                                          \
  do {                                                                                       \
    ncclResult_t res_ = (call);                                                              \
    if (res_ != (want) && res_ != (want2))                                                   \
      fail((rank), "%s:%d: %s returned %d (%s), want %d (%s)", __FILE__, __LINE__, #call,    \
           (int)res_, ncclGetErrorString(res_), (int)(want), ncclGetErrorString(want));      \
  } while (0)
#define EXPECT_CODE(rank, comm, call, want) EXPECT_CODE2(rank, comm, call, want, want)

static inline void on_alarm(int sig) {
  static const char head[] = ": FAIL: watchdog: no progress within the time limit (a hang)\n";
  int i;
  (void)sig;
  if (write(2, g_prog, strlen(g_prog)) < 0 || write(2, head, sizeof head - 1) < 0)
    _exit(124);
  for (i = 0; i <= MAX_RANKS; i++) {
    size_t len = strnlen(g_stage[i], sizeof g_stage[i]);
    if (len) {
      char pre[32];
      int k = snprintf(pre, sizeof pre, "  %s %d at: ", i < MAX_RANKS ? "rank" : "main",
                       i < MAX_RANKS ? i : 0);
      if (write(2, pre, (size_t)k) < 0 || write(2, g_stage[i], len) < 0 || write(2, "\n", 1) < 0)
        break;
    }
  }
  _exit(124);
}

/* Turn a hang into a failure after `seconds`. */
static inline void watchdog(const char *prog, unsigned seconds) {
  struct sigaction sa;
  g_prog = prog;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm(seconds);
}

static inline int parse_ranks(int argc, char **argv, int lo, int hi) {
  int n = argc > 1 ? atoi(argv[1]) : 0;
  if (n < lo || n > hi) {
    fprintf(stderr, "usage: %s NRANKS (%d..%d)\n", argv[0], lo, hi);
    exit(2);
  }
  return n;
}

/* ---- random data -------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The seed of one rank's data in one case. */
static inline uint64_t rank_seed(uint64_t case_seed, int rank) {
  return mix64(case_seed ^ (0xa0761d6478bd642full * (uint64_t)(rank + 1)));
}

/* ---- element types ------------------------------------------------------------------ */

#define NUM_TEST_TYPES 10
static const ncclDataType_t TEST_TYPES[NUM_TEST_TYPES] = {ncclInt8,    ncclUint8,    ncclInt32,   ncclUint32,
                                                          ncclInt64,   ncclUint64,   ncclFloat16, ncclBfloat16,
                                                          ncclFloat32, ncclFloat64};

static inline size_t type_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 1;
  }
}

static inline const char *type_name(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: return "int8";
  case ncclUint8: return "uint8";
  case ncclInt32: return "int32";
  case ncclUint32: return "uint32";
  case ncclInt64: return "int64";
  case ncclUint64: return "uint64";
  case ncclFloat16: return "float16";
  case ncclBfloat16: return "bfloat16";
  case ncclFloat32: return "float32";
  case ncclFloat64: return "float64";
  default: return "?";
  }
}

static inline int type_is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}

static inline int type_is_unsigned(ncclDataType_t t) {
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

/* 2^k for k in the normal double range, without libm. */
static inline double pow2i(int k) {
  uint64_t u = (uint64_t)(k + 1023) << 52;
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* x rounded to nearest (ties to even) in a binary format with `man` stored mantissa bits
 * and `ebits` exponent bits (float16: 10, 5; bfloat16: 7, 8; float32: 23, 8), as its bits.
 * Subnormal results are rounded too; overflow gives infinity. */
static inline uint32_t fmt_from_double(double x, int man, int ebits) {
  uint64_t u, m, q, rem, half;
  uint32_t sign, bits;
  int e, bias = (1 << (ebits - 1)) - 1, emax = (1 << ebits) - 1, E, shift;
  memcpy(&u, &x, sizeof u);
  sign = (uint32_t)(u >> 63) << (man + ebits);
  e = (int)((u >> 52) & 0x7ff);
  m = u & ((1ull << 52) - 1);
  if (e == 0x7ff) /* infinity or NaN */
    return sign | ((uint32_t)emax << man) | (m ? 1u << (man - 1) : 0u);
  if (e == 0) /* zero, or a double subnormal: far below every target's range */
    return sign;
  m |= 1ull << 52;
  E = e - 1023 + bias;
  shift = 52 - man;
  if (E < 1) { /* subnormal in the target */
    shift += 1 - E;
    E = 0;
  }
  if (shift >= 64)
    return sign;
  q = m >> shift;
  rem = m & ((1ull << shift) - 1);
  half = 1ull << (shift - 1);
  if (rem > half || (rem == half && (q & 1)))
    q++;
  if (E == 0) {
    bits = (uint32_t)q; /* a carry into bit `man` is the smallest normal, correctly */
  } else {
    if (q >> (man + 1)) {
      q >>= 1;
      E++;
    }
    if (E >= emax)
      return sign | ((uint32_t)emax << man);
    bits = ((uint32_t)E << man) | ((uint32_t)q & ((1u << man) - 1));
  }
  return sign | bits;
}

/* The value of the format's `bits` (see fmt_from_double), exactly. */
static inline double fmt_to_double(uint32_t bits, int man, int ebits) {
  int bias = (1 << (ebits - 1)) - 1, emax = (1 << ebits) - 1;
  int E = (int)((bits >> man) & (uint32_t)emax);
  uint32_t m = bits & ((1u << man) - 1);
  double v;
  if (E == emax)
    v = m ? NAN : INFINITY;
  else if (E == 0)
    v = (double)m * pow2i(1 - bias - man);
  else
    v = (double)(m | (1u << man)) * pow2i(E - bias - man);
  return (bits >> (man + ebits)) & 1 ? -v : v;
}

static inline uint16_t half_from_double(double x) { return (uint16_t)fmt_from_double(x, 10, 5); }
static inline double half_to_double(uint16_t h) { return fmt_to_double(h, 10, 5); }
static inline uint16_t bf16_from_double(double x) { return (uint16_t)fmt_from_double(x, 7, 8); }
static inline double bf16_to_double(uint16_t h) { return fmt_to_double(h, 7, 8); }

/* float16 bits of f, which must be a normal float16 value or zero (no rounding: fast). */
static inline uint16_t half_of_exact(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) == 0)
    return (uint16_t)(u >> 16);
  return (uint16_t)(((u >> 16) & 0x8000u) | ((((u >> 23) & 0xffu) - 112u) << 10) | ((u >> 13) & 0x3ffu));
}

/* bfloat16 bits of f, which must be a bfloat16 value (no rounding: fast). */
static inline uint16_t bf16_of_exact(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

/* Store the integer `v` (exactly representable in `t` by construction) as element i. */
static inline void store_int(ncclDataType_t t, void *buf, size_t i, int64_t v) {
  switch (t) {
  case ncclInt8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case ncclInt64: ((int64_t *)buf)[i] = v; break;
  case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  case ncclFloat16: ((uint16_t *)buf)[i] = half_of_exact((float)v); break;
  case ncclBfloat16: ((uint16_t *)buf)[i] = bf16_of_exact((float)v); break;
  case ncclFloat32: ((float *)buf)[i] = (float)v; break;
  case ncclFloat64: ((double *)buf)[i] = (double)v; break;
  default: break;
  }
}

/* Element i of an integer type. */
static inline int64_t load_int(ncclDataType_t t, const void *buf, size_t i) {
  switch (t) {
  case ncclInt8: return ((const int8_t *)buf)[i];
  case ncclUint8: return ((const uint8_t *)buf)[i];
  case ncclInt32: return ((const int32_t *)buf)[i];
  case ncclUint32: return ((const uint32_t *)buf)[i];
  case ncclInt64: return ((const int64_t *)buf)[i];
  case ncclUint64: return (int64_t)((const uint64_t *)buf)[i];
  default: return 0;
  }
}

/* Element i of a float type, exactly, as a double. */
static inline double load_float(ncclDataType_t t, const void *buf, size_t i) {
  switch (t) {
  case ncclFloat16: return half_to_double(((const uint16_t *)buf)[i]);
  case ncclBfloat16: return bf16_to_double(((const uint16_t *)buf)[i]);
  case ncclFloat32: return ((const float *)buf)[i];
  case ncclFloat64: return ((const double *)buf)[i];
  default: return 0;
  }
}

/* Element i's bits (in the low bytes). */
static inline uint64_t load_bits(ncclDataType_t t, const void *buf, size_t i) {
  switch (type_size(t)) {
  case 1: return ((const uint8_t *)buf)[i];
  case 2: return ((const uint16_t *)buf)[i];
  case 4: return ((const uint32_t *)buf)[i];
  default: return ((const uint64_t *)buf)[i];
  }
}

/* The bits of the integer v in t (v exactly representable in t by construction). */
static inline uint64_t value_bits(ncclDataType_t t, int64_t v) {
  switch (t) {
  case ncclInt8: case ncclUint8: return (uint8_t)v;
  case ncclInt32: case ncclUint32: return (uint32_t)v;
  case ncclFloat16: return half_of_exact((float)v);
  case ncclBfloat16: return bf16_of_exact((float)v);
  case ncclFloat32: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
  }
  case ncclFloat64: {
    double f = (double)v;
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    return u;
  }
  default: return (uint64_t)v;
  }
}

/* Bits of x rounded to nearest in float type t. */
static inline uint64_t float_bits_of(ncclDataType_t t, double x) {
  switch (t) {
  case ncclFloat16: return half_from_double(x);
  case ncclBfloat16: return bf16_from_double(x);
  case ncclFloat32: {
    float f = (float)x;
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
  }
  default: {
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
  }
  }
}

/* Distance in units in the last place between two finite values of float type t given
 * as bits (adjacent values are 1 apart; +0 and -0 are 0 apart). */
static inline uint64_t ulp_distance(ncclDataType_t t, uint64_t a, uint64_t b) {
  int w = (int)type_size(t) * 8;
  uint64_t signbit = 1ull << (w - 1);
  int64_t oa = (a & signbit) ? -(int64_t)(a & ~signbit) : (int64_t)a;
  int64_t ob = (b & signbit) ? -(int64_t)(b & ~signbit) : (int64_t)b;
  return oa > ob ? (uint64_t)(oa - ob) : (uint64_t)(ob - oa);
}

/* Print an element for a failure message. */
static inline void fmt_elem(ncclDataType_t t, const void *buf, size_t i, char *out, size_t len) {
  if (type_is_float(t))
    snprintf(out, len, "%.17g (bits 0x%llx)", load_float(t, buf, i),
             (unsigned long long)load_bits(t, buf, i));
  else if (type_is_unsigned(t))
    snprintf(out, len, "%llu", (unsigned long long)load_bits(t, buf, i));
  else
    snprintf(out, len, "%lld", (long long)load_int(t, buf, i));
}

/* ---- test data and the reduction reference ------------------------------------------- */

/* What the data of a case must allow. Every value is an integer; for floats the ranges keep
 * every partial result an exactly representable integer, so results are exact. */
enum domain {
  DOM_SUM,    /* sum and avg over up to MAX_RANKS ranks */
  DOM_PREMUL, /* PREMUL_SCALAR * sum */
  DOM_PROD,   /* product: -1, 1, 2 (2 only on ranks < 6: |product| <= 64) */
  DOM_ANY     /* min, max and the data movers: a wide range */
};

#define PREMUL_SCALAR 3

/* Width in bits of the range of domain d's values in t: signed types take
 * [-2^(b-1), 2^(b-1)), unsigned ones [0, 2^b). For sums (over up to MAX_RANKS = 2^3 ranks,
 * times PREMUL_SCALAR <= 4 for DOM_PREMUL) every partial result stays an integer within the
 * type's exact range (int8 127, uint8 255, float16 2048, bfloat16 256, float32 2^24). */
static inline int range_bits(ncclDataType_t t, enum domain d) {
  static const int sum_bits[] = {5, 5, 29, 29, 41, 41, 9, 22, 41, 6};
  static const int any_bits[] = {8, 8, 32, 32, 64, 63, 12, 25, 54, 9};
  int k = (int)t < 10 ? (int)t : 0;
  switch (d) {
  case DOM_SUM: return sum_bits[k];
  case DOM_PREMUL: return sum_bits[k] - 2;
  default: return any_bits[k];
  }
}

/* Element i of `rank`'s data (the rank's seed `rs`) for domain d. */
static inline int64_t gen_value(ncclDataType_t t, enum domain d, uint64_t rs, int rank, size_t i) {
  uint64_t h = mix64(rs + (uint64_t)i * 0xd1b54a32d192ed03ull);
  int b;
  if (d == DOM_PROD) {
    uint64_t k = ((h >> 32) * (rank < 6 ? 3u : 2u)) >> 32; /* 0..2, or 0..1 on ranks >= 6 */
    if (type_is_unsigned(t))
      return 1 + (int64_t)(k & (rank < 6));
    return k == 0 ? -1 : (int64_t)k;
  }
  b = range_bits(t, d);
  if (b == 64)
    return (int64_t)h;
  if (type_is_unsigned(t))
    return (int64_t)(h >> (64 - b));
  return (int64_t)(h >> (64 - b)) - ((int64_t)1 << (b - 1));
}

/* Fill elements [0, count) of buf with `rank`'s data, starting at data index `first`. */
static inline void fill_data(ncclDataType_t t, enum domain d, uint64_t case_seed, int rank, void *buf,
                      size_t first, size_t count) {
  uint64_t rs = rank_seed(case_seed, rank);
  size_t i;
  for (i = 0; i < count; i++)
    store_int(t, buf, i, gen_value(t, d, rs, rank, first + i));
}

static inline enum domain domain_of(ncclRedOp_t op, int premul) {
  if (premul)
    return DOM_PREMUL;
  switch (op) {
  case ncclSum: case ncclAvg: return DOM_SUM;
  case ncclProd: return DOM_PROD;
  default: return DOM_ANY;
  }
}

/* Reference of element i of a reduction over ranks 0..n-1: the exact integer result
 * (int64; sums and products cannot overflow by construction) — for avg, the sum (the
 * caller divides). `red` is the built-in op (ncclSum for pre-multiplied sums, with
 * premul set). */
static inline int64_t ref_reduce(ncclDataType_t t, ncclRedOp_t red, int premul, const uint64_t *rs,
                                 int n, size_t i) {
  enum domain d = domain_of(red, premul);
  int64_t acc = gen_value(t, d, rs[0], 0, i), v;
  int r;
  for (r = 1; r < n; r++) {
    v = gen_value(t, d, rs[r], r, i);
    switch (red) {
    case ncclProd: acc *= v; break;
    case ncclMax: acc = v > acc ? v : acc; break;
    case ncclMin: acc = v < acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  return premul ? acc * PREMUL_SCALAR : acc;
}

/* Whether element i of `got` is the reduction's result `ref` (from ref_reduce) for n ranks;
 * writes a description of both values into `why` when not. Integers and exact float ops:
 * equal. Avg: integers sum / n truncated (as NCCL); floats within 1 ulp of sum / n rounded
 * to the type. */
static inline int check_reduced(ncclDataType_t t, ncclRedOp_t red, int n, int64_t ref, const void *got,
                         size_t i, char *why, size_t len) {
  char g[64];
  if (!type_is_float(t)) {
    int64_t want = red == ncclAvg ? ref / n : ref;
    int64_t have = load_int(t, got, i);
    if (t == ncclUint64)
      have = (int64_t)load_bits(t, got, i);
    if (have == want)
      return 1;
    fmt_elem(t, got, i, g, sizeof g);
    snprintf(why, len, "got %s, want %lld", g, (long long)want);
    return 0;
  }
  if (red == ncclAvg) {
    double exact = (double)ref / n;
    uint64_t want = float_bits_of(t, exact), have = load_bits(t, got, i);
    double hv = load_float(t, got, i);
    if (hv == hv && hv - hv == 0 && ulp_distance(t, want, have) <= 1)
      return 1;
    fmt_elem(t, got, i, g, sizeof g);
    snprintf(why, len, "got %s, want %.17g (+-1 ulp)", g, exact);
    return 0;
  }
  if (load_float(t, got, i) == (double)ref)
    return 1;
  fmt_elem(t, got, i, g, sizeof g);
  snprintf(why, len, "got %s, want %lld", g, (long long)ref);
  return 0;
}

/* A buffer of `bytes` plus GUARD poisoned bytes; the payload poisoned too. */
static inline void *alloc_poisoned(size_t bytes) {
  unsigned char *p = malloc(bytes + GUARD);
  if (!p)
    fail(-1, "out of memory (%zu bytes)", bytes + GUARD);
  memset(p, POISON, bytes + GUARD);
  return p;
}

/* Index of the first byte in [from, to) of buf that is not POISON, or `to`. */
static inline size_t first_unpoisoned(const void *buf, size_t from, size_t to) {
  const unsigned char *p = buf;
  size_t i;
  for (i = from; i < to; i++)
    if (p[i] != POISON)
      return i;
  return to;
}

/* Compare elements [0, count) of `got` with `rank`'s data from index `first` (exact
 * bits); on the first mismatch write it into `why` and return 0. */
static inline int check_data(ncclDataType_t t, enum domain d, uint64_t case_seed, int rank, const void *got,
                             size_t first, size_t count, char *why, size_t len) {
  uint64_t rs = rank_seed(case_seed, rank);
  size_t i;
  for (i = 0; i < count; i++) {
    int64_t v = gen_value(t, d, rs, rank, first + i);
    if (load_bits(t, got, i) != value_bits(t, v)) {
      char g[64];
      fmt_elem(t, got, i, g, sizeof g);
      snprintf(why, len, "element %zu: got %s, want %lld (rank %d's element %zu)", i, g, (long long)v,
               rank, first + i);
      return 0;
    }
  }
  return 1;
}

#endif
