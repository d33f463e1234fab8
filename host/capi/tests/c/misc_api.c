/* More of the C ABI with ranks as threads on the CPU backend, each call's success and its
 * bad arguments:
 *
 * - ncclCommInitRankScalable with two ids (every rank passes the same list);
 * - PreMulSum: an all-reduce and a reduce-scatter with a host scalar
 *   (ncclScalarHostImmediate, changed after the call: it was read by it) and with a
 *   "device" scalar (ncclScalarDevice: memory from ncclMemAlloc, read when a collective
 *   uses the operator, so a new value counts), checked against the host reference;
 * - ncclGroupSimulateEnd: a group of an all-reduce, an all-gather and a send/recv ring
 *   with poisoned outputs: success, estimatedTime > 0 and growing with the size, nothing
 *   written; a bad simInfo is ncclInvalidArgument (the group still ends), without a group
 *   ncclInvalidUsage; a real group afterwards computes everything;
 * - ncclCommRevoke on a live communicator: bad flags refused first; after it collectives
 *   and ncclCommFinalize are ncclInvalidUsage, ncclCommSplit still works (the child runs
 *   an all-reduce), destroy works.
 *
 * usage: misc_api NRANKS (1..8) */
#include "common.h"

static int g_n;
static ncclUniqueId g_ids[2];
static pthread_barrier_t g_barrier;
static int g_checks[MAX_RANKS];

#define EXPECT_R(rank, comm, want, needle, call)                                               \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    g_checks[rank]++;                                                                          \
    if (r_ != (want))                                                                          \
      fail((rank), "%s:%d: %s returned %d (%s), want %d; last error: %s", __FILE__, __LINE__,  \
           #call, (int)r_, ncclGetErrorString(r_), (int)(want), last_error(comm));             \
    if ((want) != ncclSuccess && (needle) && !strstr(last_error(comm), (needle)))              \
      fail((rank), "%s:%d: %s: the message \"%s\" does not mention \"%s\"", __FILE__, __LINE__, \
           #call, last_error(comm), (const char *)(needle));                                  \
  } while (0)

/* Rank r's element i. */
static float value(int r, int i) { return (float)((r + 1) * (i % 17 + 1)); }

/* sum over ranks of scalar * value(q, i). */
static float premul_ref(float scalar, int i) {
  float s = 0;
  int q;
  for (q = 0; q < g_n; q++)
    s += scalar * value(q, i);
  return s;
}

static void premul(int r, ncclComm_t comm) {
  enum { N = 1000 };
  float send[N * MAX_RANKS], recv[N * MAX_RANKS], host = 3.0f, *dev = NULL;
  ncclRedOp_t hop, dop;
  int i, pass;
  for (i = 0; i < N * g_n; i++)
    send[i] = value(r, i % N);
  CHECK(r, comm, ncclRedOpCreatePreMulSum(&hop, &host, ncclFloat32, ncclScalarHostImmediate, comm));
  host = 100.0f; /* read by the call: no effect */
  CHECK(r, comm, ncclAllReduce(send, recv, N, ncclFloat32, hop, comm, STREAM));
  for (i = 0; i < N; i++)
    if (recv[i] != premul_ref(3.0f, i))
      fail(r, "premul (host scalar 3) all-reduce element %d: %g, want %g", i, recv[i], premul_ref(3.0f, i));
  CHECK(r, comm, ncclMemAlloc((void **)&dev, sizeof(float)));
  for (pass = 0; pass < 2; pass++) {
    float scalar = pass ? 0.5f : 2.0f;
    *dev = scalar; /* the CPU backend's "device" memory is host memory */
    if (pass == 0)
      CHECK(r, comm, ncclRedOpCreatePreMulSum(&dop, dev, ncclFloat32, ncclScalarDevice, comm));
    CHECK(r, comm, ncclAllReduce(send, recv, N, ncclFloat32, dop, comm, STREAM));
    for (i = 0; i < N; i++)
      if (recv[i] != premul_ref(scalar, i))
        fail(r, "premul (device scalar %g) all-reduce element %d: %g, want %g", scalar, i, recv[i],
             premul_ref(scalar, i));
    CHECK(r, comm, ncclReduceScatter(send, recv, N, ncclFloat32, dop, comm, STREAM));
    for (i = 0; i < N; i++)
      if (recv[i] != premul_ref(scalar, i))
        fail(r, "premul (device scalar %g) reduce-scatter element %d: %g, want %g", scalar, i, recv[i],
             premul_ref(scalar, i));
    g_checks[r] += 2;
  }
  EXPECT_R(r, comm, ncclInvalidArgument, "made for", ncclAllReduce(send, recv, N, ncclInt32, dop, comm, STREAM));
  EXPECT_R(r, comm, ncclInvalidArgument, "NULL",
           ncclRedOpCreatePreMulSum(&dop, NULL, ncclFloat32, ncclScalarDevice, comm));
  CHECK(r, comm, ncclRedOpDestroy(hop, comm));
  CHECK(r, comm, ncclRedOpDestroy(dop, comm));
  CHECK(r, comm, ncclMemFree(dev));
}

/* One group: an all-reduce, an all-gather and a send/recv ring of `count` floats. */
static void group_ops(int r, ncclComm_t comm, const float *send, float *ar, float *ag, float *ring, size_t count) {
  CHECK(r, comm, ncclAllReduce(send, ar, count, ncclFloat32, ncclSum, comm, STREAM));
  CHECK(r, comm, ncclAllGather(send, ag, count, ncclFloat32, comm, STREAM));
  CHECK(r, comm, ncclSend(send, count, ncclFloat32, (r + 1) % g_n, comm, STREAM));
  CHECK(r, comm, ncclRecv(ring, count, ncclFloat32, (r + g_n - 1) % g_n, comm, STREAM));
}

static void simulate(int r, ncclComm_t comm) {
  enum { N = 4099, BIG = 1 << 18 };
  static float send[2][BIG], ar[2][BIG], ag[2][BIG * 2], ring[2][BIG];
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER, big = NCCL_SIM_INFO_INITIALIZER, bad = NCCL_SIM_INFO_INITIALIZER;
  size_t i;
  int q;
  if (g_n > 2)
    return; /* the all-gather buffer holds two ranks' data */
  for (i = 0; i < BIG; i++)
    send[r][i] = value(r, (int)i);
  memset(ar[r], POISON, sizeof ar[r]);
  memset(ag[r], POISON, sizeof ag[r]);
  memset(ring[r], POISON, sizeof ring[r]);

  CHECK(r, comm, ncclGroupStart());
  group_ops(r, comm, send[r], ar[r], ag[r], ring[r], N);
  CHECK(r, comm, ncclGroupSimulateEnd(&info));
  if (!(info.estimatedTime > 0))
    fail(r, "ncclGroupSimulateEnd: estimatedTime %g, want > 0", (double)info.estimatedTime);
  CHECK(r, comm, ncclGroupStart());
  group_ops(r, comm, send[r], ar[r], ag[r], ring[r], BIG);
  CHECK(r, comm, ncclGroupSimulateEnd(&big));
  if (!(big.estimatedTime > info.estimatedTime))
    fail(r, "ncclGroupSimulateEnd: %g us for %d floats, %g us for %d", (double)big.estimatedTime, (int)BIG,
         (double)info.estimatedTime, (int)N);
  bad.magic = 0;
  CHECK(r, comm, ncclGroupStart());
  group_ops(r, comm, send[r], ar[r], ag[r], ring[r], N);
  EXPECT_R(r, comm, ncclInvalidArgument, "magic", ncclGroupSimulateEnd(&bad));
  EXPECT_R(r, comm, ncclInvalidUsage, "no group", ncclGroupSimulateEnd(&info));
  EXPECT_R(r, comm, ncclInvalidUsage, "no group", ncclGroupEnd());
  pthread_barrier_wait(&g_barrier); /* every rank done simulating before anything runs */
  if (first_unpoisoned(ar[r], 0, sizeof ar[r]) != sizeof ar[r] ||
      first_unpoisoned(ag[r], 0, sizeof ag[r]) != sizeof ag[r] ||
      first_unpoisoned(ring[r], 0, sizeof ring[r]) != sizeof ring[r])
    fail(r, "a simulated group wrote its outputs");
  g_checks[r] += 3;

  CHECK(r, comm, ncclGroupStart());
  group_ops(r, comm, send[r], ar[r], ag[r], ring[r], N);
  CHECK(r, comm, ncclGroupEnd());
  for (i = 0; i < N; i++) {
    float sum = 0;
    for (q = 0; q < g_n; q++)
      sum += value(q, (int)i);
    if (ar[r][i] != sum || ring[r][i] != value((r + g_n - 1) % g_n, (int)i))
      fail(r, "after the simulation, a real group: element %zu: all-reduce %g (want %g), ring %g", i, ar[r][i],
           sum, ring[r][i]);
    for (q = 0; q < g_n; q++)
      if (ag[r][(size_t)q * N + i] != value(q, (int)i))
        fail(r, "after the simulation, a real group: all-gather block %d element %zu", q, i);
  }
}

static void revoke(int r, ncclComm_t comm) {
  ncclComm_t child = NULL;
  int32_t x = r + 1, y = 0, me = -1;
  EXPECT_R(r, comm, ncclInvalidArgument, "revokeFlags", ncclCommRevoke(comm, 1));
  CHECK(r, comm, ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, comm, STREAM)); /* still live */
  CHECK(r, comm, ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  EXPECT_R(r, comm, ncclInvalidUsage, "revoked", ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, comm, STREAM));
  EXPECT_R(r, comm, ncclInvalidUsage, "revoked", ncclSend(&x, 1, ncclInt32, 0, comm, STREAM));
  EXPECT_R(r, comm, ncclInvalidUsage, "revoke", ncclCommFinalize(comm));
  /* Split still works on a revoked communicator. */
  CHECK(r, comm, ncclCommSplit(comm, 0, g_n - r, &child, NULL));
  CHECK(r, child, ncclCommUserRank(child, &me));
  if (me != g_n - 1 - r)
    fail(r, "split of the revoked communicator: rank %d, want %d", me, g_n - 1 - r);
  CHECK(r, child, ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, child, STREAM));
  if (y != g_n * (g_n + 1) / 2)
    fail(r, "all-reduce on the split of a revoked communicator: %d", y);
  CHECK(r, child, ncclCommDestroy(child));
}

static void *rank_main(void *arg) {
  int r = (int)(intptr_t)arg, n = -1, me = -1;
  ncclComm_t comm = NULL;
  set_stage(r, "ncclCommInitRankScalable");
  CHECK(r, NULL, ncclCommInitRankScalable(&comm, g_n, r, 2, g_ids, NULL));
  CHECK(r, comm, ncclCommCount(comm, &n));
  CHECK(r, comm, ncclCommUserRank(comm, &me));
  if (n != g_n || me != r)
    fail(r, "ncclCommInitRankScalable: rank %d of %d", me, n);
  set_stage(r, "premul");
  premul(r, comm);
  set_stage(r, "simulate");
  simulate(r, comm);
  set_stage(r, "revoke");
  revoke(r, comm);
  set_stage(r, "destroy");
  CHECK(r, comm, ncclCommDestroy(comm));
  set_stage(r, "done");
  return NULL;
}

int main(int argc, char **argv) {
  pthread_t th[MAX_RANKS];
  int r, e, total = 0;
  watchdog("misc_api", 60);
  g_n = parse_ranks(argc, argv, 1, MAX_RANKS);
  CHECK(-1, NULL, ncclGetUniqueId(&g_ids[0]));
  CHECK(-1, NULL, ncclGetUniqueId(&g_ids[1]));
  if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_n))
    fail(-1, "pthread_barrier_init");
  for (r = 0; r < g_n; r++)
    if ((e = pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r)))
      fail(r, "pthread_create: %d", e);
  set_stage(-1, "joining the rank threads");
  for (r = 0; r < g_n; r++)
    pthread_join(th[r], NULL);
  for (r = 0; r < g_n; r++)
    total += g_checks[r];
  pthread_barrier_destroy(&g_barrier);
  printf("misc_api: %d ranks: %d checks OK%s\n", g_n, total,
         g_n > 2 ? " (ncclGroupSimulateEnd checked with 1 and 2 ranks only)" : "");
  return 0;
}
