/* Every collective through the C ABI, ranks as threads of one process (each calls
 * ncclCommInitRank with the one ncclUniqueId): all-reduce (sum, prod, max, min, avg and a
 * pre-multiplied sum with a host scalar), broadcast, bcast, reduce, all-gather,
 * reduce-scatter, all-to-all, gather, scatter, and send/recv (a ring in a group, and all
 * pairs in a group posted in reversed order); in place and out of place; int8, uint8, int32,
 * uint32, int64, uint64, float16, bfloat16, float32, float64; counts 0, 1, 7, 1000, 65537
 * and 2^20 + 3 (the largest only for a subset, at least one case over 1 MiB per
 * collective). Inputs are random
 * per rank and case, outputs poisoned before each call, and every output element is
 * compared with a host reference (exact: integer-valued data whose results are exact in
 * every type; avg of floats within 1 ulp of the exact quotient rounded to the type). Inputs
 * must come back unchanged, bytes past every buffer untouched, and the outputs of ranks that
 * get none (reduce's and gather's non-roots) still poisoned.
 *
 * usage: colls_threads NRANKS (1..8) */
#include "common.h"

#include <time.h>

#define MID_COUNT 65537
#define BIG_COUNT ((1u << 20) + 3)

static const size_t COUNTS[] = {0, 1, 7, 1000, MID_COUNT, BIG_COUNT};
#define NUM_COUNTS (sizeof COUNTS / sizeof COUNTS[0])

enum coll {
  ALLREDUCE,
  BROADCAST,
  BCAST,
  REDUCE,
  ALLGATHER,
  REDUCESCATTER,
  ALLTOALL,
  GATHER,
  SCATTER,
  RING,
  ALLPAIRS,
  NUM_COLLS
};

static const char *const COLL_NAMES[NUM_COLLS] = {
    "allreduce", "broadcast", "bcast", "reduce", "allgather", "reducescatter",
    "alltoall", "gather", "scatter", "sendrecv-ring", "sendrecv-allpairs-reversed"};

/* The reduction ops, by index: the five built-ins, then the pre-multiplied sum. */
#define NUM_OPS 6
#define OP_PREMUL 5
static const ncclRedOp_t BUILTIN[NUM_OPS] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, ncclSum};
static const char *const OP_NAMES[NUM_OPS] = {"sum", "prod", "max", "min", "avg", "premulsum"};

static int is_reduction(enum coll c) { return c == ALLREDUCE || c == REDUCE || c == REDUCESCATTER; }

/* Collectives whose buffers hold NRANKS blocks of `count` elements. */
static int is_blocked(enum coll c) {
  return c == ALLGATHER || c == REDUCESCATTER || c == ALLTOALL || c == GATHER || c == SCATTER ||
         c == ALLPAIRS;
}

static int has_in_place(enum coll c) { return c != ALLTOALL && c != RING && c != ALLPAIRS && c != BCAST; }

/* Which (collective, type, op, size) cases run: every one up to 1000 elements and at 65537;
 * at 2^20 + 3 int8 and float32 with sum (or no op) for every collective (over 1 MiB per rank),
 * and bfloat16 avg for the all-reduce. Every rank makes the same choice. */
static int want_case(enum coll c, ncclDataType_t t, int opi, size_t size) {
  if (size <= MID_COUNT)
    return 1;
  return ((t == ncclInt8 || t == ncclFloat32) && opi <= 0) || (t == ncclBfloat16 && c == ALLREDUCE && opi == 4);
}

/* The `count` argument of a case of `size`: the size itself, except for the collectives with
 * NRANKS blocks above 1000 elements, where it is the size over NRANKS rounded up (so the
 * largest buffers stay over 1 MiB and the run time grows linearly with the rank count). */
static size_t case_count(enum coll c, size_t size, int n) {
  return is_blocked(c) && size > 1000 ? (size + (size_t)n - 1) / (size_t)n : size;
}

struct kase {
  enum coll coll;
  ncclDataType_t t;
  int opi; /* -1: no op */
  size_t count;
  int in_place;
  int root;
  uint64_t seed;
};

struct rank_state {
  int rank;
  ncclComm_t comm;
  ncclRedOp_t premul; /* for the current type */
  unsigned shared_refs; /* shared references used so far (picks the buffer) */
  unsigned long cases;
  unsigned long long checked; /* output elements compared */
};

static int g_n;
static ncclUniqueId g_id;
static pthread_barrier_t g_barrier;
/* References shared between the ranks (each computes a slice), two alternating: a rank can
 * only start writing reference k + 2 after every rank passed the barrier of reference k + 1,
 * that is after every rank finished checking against reference k. */
static int64_t *g_ref[2];

static void describe(const struct kase *k, char *out, size_t len) {
  snprintf(out, len, "%s %s%s%s count=%zu %s root=%d seed=%llu", COLL_NAMES[k->coll], type_name(k->t),
           k->opi >= 0 ? " " : "", k->opi >= 0 ? OP_NAMES[k->opi] : "", k->count,
           k->in_place ? "in-place" : "out-of-place", k->root, (unsigned long long)k->seed);
}

static void case_fail(struct rank_state *s, const struct kase *k, const char *what, const char *why) {
  char d[200];
  describe(k, d, sizeof d);
  fail(s->rank, "%s: %s: %s", d, what, why);
}

static ncclRedOp_t op_handle(const struct rank_state *s, int opi) {
  return opi == OP_PREMUL ? s->premul : BUILTIN[opi];
}

static enum domain case_domain(const struct kase *k) {
  return k->opi < 0 ? DOM_ANY : domain_of(BUILTIN[k->opi], k->opi == OP_PREMUL);
}

/* The reduction reference of elements [0, total), computed by all ranks together. */
static const int64_t *shared_ref(struct rank_state *s, const struct kase *k, size_t total) {
  int64_t *ref = g_ref[s->shared_refs++ & 1];
  uint64_t rs[MAX_RANKS];
  size_t lo = total * (size_t)s->rank / (size_t)g_n, hi = total * (size_t)(s->rank + 1) / (size_t)g_n, i;
  int q, b;
  for (q = 0; q < g_n; q++)
    rs[q] = rank_seed(k->seed, q);
  for (i = lo; i < hi; i++)
    ref[i] = ref_reduce(k->t, BUILTIN[k->opi], k->opi == OP_PREMUL, rs, g_n, i);
  b = pthread_barrier_wait(&g_barrier);
  if (b != 0 && b != PTHREAD_BARRIER_SERIAL_THREAD)
    fail(s->rank, "pthread_barrier_wait: %d", b);
  return ref;
}

/* Output elements [0, count) of `got` against ref[first ..]. */
static void check_ref(struct rank_state *s, const struct kase *k, const char *what, const int64_t *ref,
                      size_t first, const void *got, size_t count) {
  char why[200], msg[240];
  size_t i;
  for (i = 0; i < count; i++)
    if (!check_reduced(k->t, BUILTIN[k->opi], g_n, ref[first + i], got, i, why, sizeof why)) {
      snprintf(msg, sizeof msg, "element %zu: %s", i, why);
      case_fail(s, k, what, msg);
    }
  s->checked += count;
}

/* Output elements [0, count) of `got` against rank `src`'s data from index `first`. */
static void check_copy(struct rank_state *s, const struct kase *k, const char *what, int src,
                       const void *got, size_t first, size_t count) {
  char why[200];
  if (!check_data(k->t, case_domain(k), k->seed, src, got, first, count, why, sizeof why))
    case_fail(s, k, what, why);
  s->checked += count;
}

/* Bytes [from, to) of buf still poisoned. */
static void check_poisoned(struct rank_state *s, const struct kase *k, const char *what, const void *buf,
                           size_t from, size_t to) {
  size_t at = first_unpoisoned(buf, from, to);
  char why[120];
  if (at != to) {
    snprintf(why, sizeof why, "byte %zu (of %zu..%zu) was written: 0x%02x", at, from, to,
             ((const unsigned char *)buf)[at]);
    case_fail(s, k, what, why);
  }
}

/* My own data, unchanged, in elements [0, count) of buf (from data index `first`). */
static void check_input(struct rank_state *s, const struct kase *k, const char *what, const void *buf,
                        size_t first, size_t count) {
  check_copy(s, k, what, s->rank, buf, first, count);
}

static void run_case(struct rank_state *s, const struct kase *k) {
  int r = s->rank, n = g_n, q, root = k->root;
  ncclComm_t comm = s->comm;
  ncclDataType_t t = k->t;
  enum domain d = case_domain(k);
  size_t c = k->count, es = type_size(t), bytes = c * es, nbytes = (size_t)n * bytes;
  unsigned char *send = NULL, *recv = NULL;
  const int64_t *ref = NULL;
  char stage[200];

  describe(k, stage, sizeof stage);
  set_stage(r, "%s", stage);
  s->cases++;

  switch (k->coll) {
  case ALLREDUCE:
    if (c)
      ref = shared_ref(s, k, c);
    send = alloc_poisoned(bytes);
    fill_data(t, d, k->seed, r, send, 0, c);
    recv = k->in_place ? send : alloc_poisoned(bytes);
    CHECK(r, comm, ncclAllReduce(send, recv, c, t, op_handle(s, k->opi), comm, STREAM));
    check_ref(s, k, "recvbuff", ref, 0, recv, c);
    check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
    if (!k->in_place)
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, c);
    break;

  case BROADCAST:
  case BCAST:
    send = alloc_poisoned(bytes);
    fill_data(t, d, k->seed, r, send, 0, c);
    if (k->coll == BCAST) {
      recv = send;
      CHECK(r, comm, ncclBcast(send, c, t, root, comm, STREAM));
    } else {
      recv = k->in_place ? send : alloc_poisoned(bytes);
      CHECK(r, comm, ncclBroadcast(send, recv, c, t, root, comm, STREAM));
    }
    check_copy(s, k, "recvbuff", root, recv, 0, c);
    check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
    if (recv != send)
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, c);
    break;

  case REDUCE:
    if (c)
      ref = shared_ref(s, k, c);
    send = alloc_poisoned(bytes);
    fill_data(t, d, k->seed, r, send, 0, c);
    recv = k->in_place ? send : alloc_poisoned(bytes);
    CHECK(r, comm, ncclReduce(send, recv, c, t, op_handle(s, k->opi), root, comm, STREAM));
    if (r == root)
      check_ref(s, k, "root's recvbuff", ref, 0, recv, c);
    else if (k->in_place)
      check_input(s, k, "non-root buffer (must be unchanged)", recv, 0, c);
    else
      check_poisoned(s, k, "non-root recvbuff (must be untouched)", recv, 0, bytes);
    check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
    if (!k->in_place)
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, c);
    break;

  case ALLGATHER:
    recv = alloc_poisoned(nbytes);
    if (k->in_place) {
      send = recv + (size_t)r * bytes;
      fill_data(t, d, k->seed, r, send, 0, c);
    } else {
      send = alloc_poisoned(bytes);
      fill_data(t, d, k->seed, r, send, 0, c);
    }
    CHECK(r, comm, ncclAllGather(send, recv, c, t, comm, STREAM));
    for (q = 0; q < n; q++)
      check_copy(s, k, "recvbuff block", q, recv + (size_t)q * bytes, 0, c);
    check_poisoned(s, k, "recvbuff guard", recv, nbytes, nbytes + GUARD);
    if (!k->in_place)
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, c);
    if (k->in_place)
      send = NULL; /* not a separate allocation */
    break;

  case REDUCESCATTER: {
    /* My block's reference only: nobody else needs it. */
    int64_t *mine = NULL;
    uint64_t rs[MAX_RANKS];
    size_t i;
    if (c) {
      mine = malloc(c * sizeof *mine);
      if (!mine)
        fail(r, "out of memory");
      for (q = 0; q < n; q++)
        rs[q] = rank_seed(k->seed, q);
      for (i = 0; i < c; i++)
        mine[i] = ref_reduce(t, BUILTIN[k->opi], k->opi == OP_PREMUL, rs, n, (size_t)r * c + i);
    }
    send = alloc_poisoned(nbytes);
    fill_data(t, d, k->seed, r, send, 0, (size_t)n * c);
    recv = k->in_place ? send + (size_t)r * bytes : alloc_poisoned(bytes);
    CHECK(r, comm, ncclReduceScatter(send, recv, c, t, op_handle(s, k->opi), comm, STREAM));
    check_ref(s, k, "recvbuff", mine, 0, recv, c);
    if (k->in_place) {
      for (q = 0; q < n; q++)
        if (q != r)
          check_input(s, k, "another rank's block (must be unchanged)", send + (size_t)q * bytes,
                      (size_t)q * c, c);
      check_poisoned(s, k, "buffer guard", send, nbytes, nbytes + GUARD);
      recv = NULL;
    } else {
      check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, (size_t)n * c);
    }
    free(mine);
    break;
  }

  case ALLTOALL:
  case ALLPAIRS:
    send = alloc_poisoned(nbytes);
    fill_data(t, d, k->seed, r, send, 0, (size_t)n * c);
    recv = alloc_poisoned(nbytes);
    if (k->coll == ALLTOALL) {
      CHECK(r, comm, ncclAlltoAll(send, recv, c, t, comm, STREAM));
    } else {
      CHECK(r, comm, ncclGroupStart());
      for (q = n - 1; q >= 0; q--) {
        CHECK(r, comm, ncclRecv(recv + (size_t)q * bytes, c, t, q, comm, STREAM));
        CHECK(r, comm, ncclSend(send + (size_t)q * bytes, c, t, q, comm, STREAM));
      }
      CHECK(r, comm, ncclGroupEnd());
    }
    /* Block q of my output is block r of rank q's input. */
    for (q = 0; q < n; q++)
      check_copy(s, k, "recvbuff block", q, recv + (size_t)q * bytes, (size_t)r * c, c);
    check_poisoned(s, k, "recvbuff guard", recv, nbytes, nbytes + GUARD);
    check_input(s, k, "sendbuff (must be unchanged)", send, 0, (size_t)n * c);
    break;

  case RING: {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    send = alloc_poisoned(bytes);
    fill_data(t, d, k->seed, r, send, 0, c);
    recv = alloc_poisoned(bytes);
    CHECK(r, comm, ncclGroupStart());
    CHECK(r, comm, ncclSend(send, c, t, next, comm, STREAM));
    CHECK(r, comm, ncclRecv(recv, c, t, prev, comm, STREAM));
    CHECK(r, comm, ncclGroupEnd());
    check_copy(s, k, "recvbuff", prev, recv, 0, c);
    check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
    check_input(s, k, "sendbuff (must be unchanged)", send, 0, c);
    break;
  }

  case GATHER:
    if (k->in_place) {
      if (r == root) {
        recv = alloc_poisoned(nbytes);
        fill_data(t, d, k->seed, r, recv + (size_t)r * bytes, 0, c);
        CHECK(r, comm, ncclGather(recv + (size_t)r * bytes, recv, c, t, root, comm, STREAM));
      } else {
        /* Non-roots have no output: their one buffer is the input. */
        recv = alloc_poisoned(bytes);
        fill_data(t, d, k->seed, r, recv, 0, c);
        CHECK(r, comm, ncclGather(recv, recv, c, t, root, comm, STREAM));
      }
    } else {
      send = alloc_poisoned(bytes);
      fill_data(t, d, k->seed, r, send, 0, c);
      recv = alloc_poisoned(nbytes);
      CHECK(r, comm, ncclGather(send, recv, c, t, root, comm, STREAM));
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, c);
    }
    if (r == root) {
      for (q = 0; q < n; q++)
        check_copy(s, k, "root's recvbuff block", q, recv + (size_t)q * bytes, 0, c);
      check_poisoned(s, k, "recvbuff guard", recv, nbytes, nbytes + GUARD);
    } else if (k->in_place) {
      check_input(s, k, "non-root buffer (must be unchanged)", recv, 0, c);
      check_poisoned(s, k, "buffer guard", recv, bytes, bytes + GUARD);
    } else {
      check_poisoned(s, k, "non-root recvbuff (must be untouched)", recv, 0, nbytes + GUARD);
    }
    break;

  case SCATTER:
    if (k->in_place) {
      if (r == root) {
        send = alloc_poisoned(nbytes);
        fill_data(t, d, k->seed, r, send, 0, (size_t)n * c);
        CHECK(r, comm, ncclScatter(send, send + (size_t)r * bytes, c, t, root, comm, STREAM));
        check_input(s, k, "root's buffer (must be unchanged)", send, 0, (size_t)n * c);
        check_poisoned(s, k, "buffer guard", send, nbytes, nbytes + GUARD);
      } else {
        /* Non-roots have no input: their one buffer is the output. */
        recv = alloc_poisoned(bytes);
        CHECK(r, comm, ncclScatter(recv, recv, c, t, root, comm, STREAM));
        check_copy(s, k, "recvbuff", root, recv, (size_t)r * c, c);
        check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
      }
    } else {
      /* Every rank's input holds its own data, so reading the wrong one shows. */
      send = alloc_poisoned(nbytes);
      fill_data(t, d, k->seed, r, send, 0, (size_t)n * c);
      recv = alloc_poisoned(bytes);
      CHECK(r, comm, ncclScatter(send, recv, c, t, root, comm, STREAM));
      check_copy(s, k, "recvbuff", root, recv, (size_t)r * c, c);
      check_poisoned(s, k, "recvbuff guard", recv, bytes, bytes + GUARD);
      check_input(s, k, "sendbuff (must be unchanged)", send, 0, (size_t)n * c);
    }
    break;

  default:
    break;
  }
  if (recv && recv != send)
    free(recv);
  free(send);
}

static void *rank_main(void *arg) {
  struct rank_state *s = arg;
  int r = s->rank, count = -1, me = -1, ti, opi, inp;
  unsigned ci;
  enum coll c;
  unsigned long caseno = 0;

  set_stage(r, "ncclCommInitRank");
  CHECK(r, NULL, ncclCommInitRank(&s->comm, g_n, g_id, r));
  if (!s->comm)
    fail(r, "ncclCommInitRank succeeded but returned a NULL comm");
  CHECK(r, s->comm, ncclCommCount(s->comm, &count));
  CHECK(r, s->comm, ncclCommUserRank(s->comm, &me));
  if (count != g_n || me != r)
    fail(r, "ncclCommCount = %d, ncclCommUserRank = %d; want %d, %d", count, me, g_n, r);

  for (ti = 0; ti < NUM_TEST_TYPES; ti++) {
    ncclDataType_t t = TEST_TYPES[ti];
    unsigned char scalar[8];
    store_int(t, scalar, 0, PREMUL_SCALAR);
    set_stage(r, "ncclRedOpCreatePreMulSum %s", type_name(t));
    CHECK(r, s->comm, ncclRedOpCreatePreMulSum(&s->premul, scalar, t, ncclScalarHostImmediate, s->comm));
    if ((int)s->premul < (int)ncclNumOps)
      fail(r, "ncclRedOpCreatePreMulSum gave op %d, a built-in op's value", (int)s->premul);
    /* A host-immediate scalar is read by the call: later changes must not matter. */
    memset(scalar, 0x55, sizeof scalar);

    for (ci = 0; ci < NUM_COUNTS; ci++)
      for (c = 0; c < NUM_COLLS; c++)
        for (opi = is_reduction(c) ? 0 : -1; opi < (is_reduction(c) ? NUM_OPS : 0); opi++)
          for (inp = 0; inp <= has_in_place(c); inp++) {
            struct kase k;
            caseno++;
            if (!want_case(c, t, opi, COUNTS[ci]))
              continue;
            k.coll = c;
            k.t = t;
            k.opi = opi;
            k.count = case_count(c, COUNTS[ci], g_n);
            k.in_place = inp;
            k.root = (int)(caseno % (unsigned long)g_n);
            k.seed = mix64(0x5eed0000ull + caseno);
            run_case(s, &k);
          }

    set_stage(r, "ncclRedOpDestroy %s", type_name(t));
    CHECK(r, s->comm, ncclRedOpDestroy(s->premul, s->comm));
  }

  set_stage(r, "ncclCommFinalize");
  CHECK(r, s->comm, ncclCommFinalize(s->comm));
  set_stage(r, "ncclCommDestroy");
  CHECK(r, s->comm, ncclCommDestroy(s->comm));
  set_stage(r, "done");
  return NULL;
}

int main(int argc, char **argv) {
  struct rank_state st[MAX_RANKS];
  pthread_t th[MAX_RANKS];
  struct timespec t0, t1;
  unsigned long long checked = 0;
  int r, e;

  watchdog("colls_threads", 60);
  g_n = parse_ranks(argc, argv, 1, MAX_RANKS);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  set_stage(-1, "ncclGetUniqueId");
  CHECK(-1, NULL, ncclGetUniqueId(&g_id));
  if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_n))
    fail(-1, "pthread_barrier_init");
  g_ref[0] = malloc(BIG_COUNT * sizeof(int64_t));
  g_ref[1] = malloc(BIG_COUNT * sizeof(int64_t));
  if (!g_ref[0] || !g_ref[1])
    fail(-1, "out of memory");
  memset(st, 0, sizeof st);
  for (r = 0; r < g_n; r++) {
    st[r].rank = r;
    if ((e = pthread_create(&th[r], NULL, rank_main, &st[r])))
      fail(r, "pthread_create: %d", e);
  }
  set_stage(-1, "joining the rank threads");
  for (r = 0; r < g_n; r++)
    pthread_join(th[r], NULL);
  for (r = 0; r < g_n; r++)
    checked += st[r].checked;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("colls_threads: %d ranks: %lu cases per rank, %llu output elements checked: OK (%.1f s)\n", g_n,
         st[0].cases, checked, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
  free(g_ref[0]);
  free(g_ref[1]);
  pthread_barrier_destroy(&g_barrier);
  return 0;
}
