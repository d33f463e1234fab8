/* Memory, windows and the host side of the Device API through the C ABI, ranks as threads
 * on the CPU backend ("device" memory is host memory there), each call's success and its
 * bad arguments:
 *
 * - ncclCommQueryProperties (NCCL_COMM_PROPERTIES_INITIALIZER): rank, nRanks, Device API
 *   support, no multimem, no GIN, no host RMA; NULL and uninitialized props refused;
 * - ncclMemAlloc / ncclMemFree: NULL pointer and size 0 refused, ncclMemFree(NULL) fine;
 * - ncclCommRegister / ncclCommDeregister: a NULL buffer refused, a handle deregistered
 *   twice refused;
 * - ncclCommWindowRegister (collective, NCCL_WIN_COLL_SYMMETRIC) / ncclCommWindowDeregister
 *   and the pointer getters: ncclWinGetUserPtr gives the buffer, every rank writes its
 *   rank into its window and reads every peer's through ncclGetLsaDevicePointer (equal to
 *   ncclGetPeerDevicePointer), the multimem getters give NULL; unknown flags, NULL
 *   outputs, a negative LSA rank, a peer outside the communicator and an offset past the
 *   window refused;
 * - ncclDevCommCreate with NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER, an LSA barrier and an
 *   LL all-to-all requirement chained into resourceRequirementsList and lsaBarrierCount 1:
 *   the handles are filled (0 and 1, NCCL's layout) and the device communicator (oxccl's
 *   OxcclDevComm: rank at byte 8, nRanks at 12) names this rank; ncclDevCommDestroy, then
 *   again (refused); GIN, multimem, LL all-to-all counts, a bad magic and NULL arguments
 *   refused with ncclInvalidUsage / ncclInvalidArgument;
 * - the team helpers: ncclTeamRankToWorld over the world team, and -1 on overflow.
 *
 * usage: devapi NRANKS (1..8) */
#include "common.h"

#include <limits.h>

static int g_n;
static ncclUniqueId g_id;
static pthread_barrier_t g_barrier;
static int g_checks[MAX_RANKS];

/* `call` must return `want`; a failure must leave a message containing `needle`. */
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

#define ARG ncclInvalidArgument
#define USAGE ncclInvalidUsage

static void properties(int r, ncclComm_t comm) {
  ncclCommProperties_t p = NCCL_COMM_PROPERTIES_INITIALIZER, bad;
  CHECK(r, comm, ncclCommQueryProperties(comm, &p));
  if (p.rank != r || p.nRanks != g_n || !p.deviceApiSupport || p.multimemSupport ||
      p.ginType != NCCL_GIN_TYPE_NONE || p.hostRmaSupport || p.nLsaTeams != 1)
    fail(r, "ncclCommQueryProperties: rank %d nRanks %d deviceApi %d multimem %d gin %d hostRma %d nLsaTeams %d",
         p.rank, p.nRanks, (int)p.deviceApiSupport, (int)p.multimemSupport, (int)p.ginType,
         (int)p.hostRmaSupport, p.nLsaTeams);
  memset(&bad, 0, sizeof bad);
  EXPECT_R(r, comm, ARG, "NULL", ncclCommQueryProperties(comm, NULL));
  EXPECT_R(r, comm, ARG, "INITIALIZER", ncclCommQueryProperties(comm, &bad));
  EXPECT_R(r, comm, ARG, "comm", ncclCommQueryProperties(NULL, &p));
}

static void memory(int r, ncclComm_t comm) {
  void *p = NULL, *h = NULL, *h2 = NULL;
  EXPECT_R(r, comm, ARG, "NULL", ncclMemAlloc(NULL, 4096));
  EXPECT_R(r, comm, ARG, "size", ncclMemAlloc(&p, 0));
  CHECK(r, comm, ncclMemFree(NULL));
  CHECK(r, comm, ncclMemAlloc(&p, 12345));
  if (!p)
    fail(r, "ncclMemAlloc gave NULL");
  memset(p, 0xab, 12345); /* the CPU backend's memory is host memory */
  CHECK(r, comm, ncclCommRegister(comm, p, 12345, &h));
  CHECK(r, comm, ncclCommRegister(comm, p, 64, &h2));
  if (!h || h == h2)
    fail(r, "ncclCommRegister handles %p and %p", h, h2);
  EXPECT_R(r, comm, ARG, "buffer", ncclCommRegister(comm, NULL, 64, &h2));
  EXPECT_R(r, comm, ARG, "NULL", ncclCommRegister(comm, p, 64, NULL));
  CHECK(r, comm, ncclCommDeregister(comm, h));
  EXPECT_R(r, comm, ARG, "registration", ncclCommDeregister(comm, h));
  CHECK(r, comm, ncclCommDeregister(comm, h2));
  CHECK(r, comm, ncclMemFree(p));
}

static void windows(int r, ncclComm_t comm) {
  const size_t bytes = 3 * 4096;
  void *buf = NULL, *user = NULL, *mine = NULL, *mm = (void *)1;
  ncclWindow_t win = NULL, bogus = NULL;
  int q;
  CHECK(r, comm, ncclMemAlloc(&buf, bytes));
  EXPECT_R(r, comm, ARG, "winFlags", ncclCommWindowRegister(comm, buf, bytes, &win, 0x100));
  EXPECT_R(r, comm, ARG, "NULL", ncclCommWindowRegister(comm, buf, bytes, NULL, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(r, comm, ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
  if (!win)
    fail(r, "ncclCommWindowRegister gave a NULL window");
  CHECK(r, comm, ncclWinGetUserPtr(comm, win, &user));
  if (user != buf)
    fail(r, "ncclWinGetUserPtr gave %p, want %p", user, buf);
  CHECK(r, comm, ncclGetLsaDevicePointer(win, 0, r, &mine));
  ((int32_t *)mine)[5] = 1000 + r;
  pthread_barrier_wait(&g_barrier);
  for (q = 0; q < g_n; q++) {
    void *lsa = NULL, *peer = NULL;
    CHECK(r, comm, ncclGetLsaDevicePointer(win, 16, q, &lsa));
    CHECK(r, comm, ncclGetPeerDevicePointer(win, 16, q, &peer));
    if (!lsa || lsa != peer)
      fail(r, "peer %d: LSA pointer %p, peer pointer %p", q, lsa, peer);
    if (((int32_t *)lsa)[1] != 1000 + q)
      fail(r, "peer %d's window holds %d at byte 20, want %d", q, ((int32_t *)lsa)[1], 1000 + q);
    g_checks[r]++;
  }
  pthread_barrier_wait(&g_barrier);
  CHECK(r, comm, ncclGetLsaMultimemDevicePointer(win, 0, &mm));
  if (mm)
    fail(r, "ncclGetLsaMultimemDevicePointer gave %p, want NULL (no multimem)", mm);
  EXPECT_R(r, comm, ARG, "negative", ncclGetLsaDevicePointer(win, 0, -1, &mine));
  EXPECT_R(r, comm, ARG, "outside the peer", ncclGetPeerDevicePointer(win, bytes, 0, &mine));
  EXPECT_R(r, comm, ARG, "LSA team", ncclGetPeerDevicePointer(win, 0, g_n, &mine));
  EXPECT_R(r, comm, ARG, "NULL", ncclGetLsaDevicePointer(win, 0, 0, NULL));
  EXPECT_R(r, comm, ARG, "window", ncclGetLsaDevicePointer(bogus, 0, 0, &mine));
  EXPECT_R(r, comm, ARG, "NULL", ncclWinGetUserPtr(comm, win, NULL));
  CHECK(r, comm, ncclCommWindowDeregister(comm, win));
  EXPECT_R(r, comm, ARG, "window", ncclWinGetUserPtr(comm, win, &user));
  CHECK(r, comm, ncclMemFree(buf));
}

static void devcomm(int r, ncclComm_t comm) {
  ncclDevCommRequirements_t reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER, bad;
  ncclDevResourceRequirements_t barReq, a2aReq;
  ncclLsaBarrierHandle_t bar;
  ncclLLA2AHandle_t a2a;
  /* ncclDevComm_t is opaque in nccl.h; oxccl writes its 112-byte OxcclDevComm. */
  union {
    unsigned char bytes[256];
    uint64_t align;
  } dc;
  ncclDevComm_t *dev = (ncclDevComm_t *)(void *)&dc;
  int slots = ncclLLA2ACalcSlots(16, 8), w_rank, w_n;

  if (slots != 16)
    fail(r, "ncclLLA2ACalcSlots(16, 8) = %d, want 16", slots);
  memset(&bar, 0xff, sizeof bar);
  memset(&a2a, 0xff, sizeof a2a);
  CHECK(r, comm, ncclLsaBarrierCreateRequirement(ncclTeamLsa(comm), 2, &bar, &barReq));
  CHECK(r, comm, ncclLLA2ACreateRequirement(2, slots, &a2a, &a2aReq));
  barReq.next = &a2aReq;
  reqs.resourceRequirementsList = &barReq;
  reqs.lsaBarrierCount = 1;
  memset(&dc, 0, sizeof dc);
  CHECK(r, comm, ncclDevCommCreate(comm, &reqs, dev));
  if (bar.bufHandle != 0 || bar.nBarriers != 2 || a2a.bufHandle != 1 || a2a.nSlots != 16)
    fail(r, "handles: barrier {%u, %d}, LL all-to-all {%u, %u}; want {0, 2}, {1, 16}", bar.bufHandle,
         bar.nBarriers, a2a.bufHandle, a2a.nSlots);
  memcpy(&w_rank, dc.bytes + 8, 4);
  memcpy(&w_n, dc.bytes + 12, 4);
  if (w_rank != r || w_n != g_n)
    fail(r, "the device communicator names rank %d of %d", w_rank, w_n);
  CHECK(r, comm, ncclDevCommDestroy(comm, dev));
  EXPECT_R(r, comm, ARG, "ncclDevCommCreate", ncclDevCommDestroy(comm, dev));

  /* Refused requirements: local checks, before any rank waits for another. */
  bad = reqs;
  bad.ginSignalCount = 4;
  EXPECT_R(r, comm, USAGE, "GIN", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.barrierCount = 1;
  EXPECT_R(r, comm, USAGE, "GIN", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.ginConnectionType = NCCL_GIN_CONNECTION_FULL;
  EXPECT_R(r, comm, USAGE, "GIN", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.lsaMultimem = true;
  EXPECT_R(r, comm, USAGE, "multicast", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.lsaLLA2ABlockCount = 2;
  EXPECT_R(r, comm, USAGE, "ncclLLA2ACreateRequirement", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.lsaBarrierCount = -1;
  EXPECT_R(r, comm, ARG, "negative", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.magic = 0x1234;
  EXPECT_R(r, comm, ARG, "magic", ncclDevCommCreate(comm, &bad, dev));
  bad = reqs;
  bad.version = NCCL_VERSION(2, 31, 0);
  EXPECT_R(r, comm, USAGE, "newer", ncclDevCommCreate(comm, &bad, dev));
  EXPECT_R(r, comm, ARG, "NULL", ncclDevCommCreate(comm, NULL, dev));
  EXPECT_R(r, comm, ARG, "NULL", ncclDevCommCreate(comm, &reqs, NULL));
  EXPECT_R(r, comm, USAGE, "GIN", ncclGinBarrierCreateRequirement(comm, ncclTeamWorld(comm), 1, NULL, &barReq));
  EXPECT_R(r, comm, ARG, "negative", ncclLsaBarrierCreateRequirement(ncclTeamLsa(comm), -1, &bar, &barReq));
}

static void teams(int r, ncclComm_t comm) {
  ncclTeam_t world = ncclTeamWorld(comm), wide = world;
  int q;
  for (q = 0; q < g_n; q++)
    if (ncclTeamRankToWorld(comm, world, q) != q || ncclTeamRankToLsa(comm, world, q) != q)
      fail(r, "team rank %d maps to world %d, LSA %d", q, ncclTeamRankToWorld(comm, world, q),
           ncclTeamRankToLsa(comm, world, q));
  wide.stride = INT_MAX;
  if (ncclTeamRankToWorld(comm, wide, r + 2) != -1 || !strstr(last_error(comm), "overflows"))
    fail(r, "an overflowing team rank did not give -1 (last error: %s)", last_error(comm));
  if (ncclTeamRankToWorld(NULL, world, 0) != -1)
    fail(r, "ncclTeamRankToWorld on a NULL comm did not give -1");
  g_checks[r] += 3;
}

static void *rank_main(void *arg) {
  int r = (int)(intptr_t)arg;
  ncclComm_t comm = NULL;
  set_stage(r, "ncclCommInitRank");
  CHECK(r, NULL, ncclCommInitRank(&comm, g_n, g_id, r));
  set_stage(r, "properties");
  properties(r, comm);
  set_stage(r, "memory");
  memory(r, comm);
  set_stage(r, "windows");
  windows(r, comm);
  set_stage(r, "device communicator");
  devcomm(r, comm);
  set_stage(r, "teams");
  teams(r, comm);
  set_stage(r, "finalize and destroy");
  CHECK(r, comm, ncclCommFinalize(comm));
  CHECK(r, comm, ncclCommDestroy(comm));
  set_stage(r, "done");
  return NULL;
}

int main(int argc, char **argv) {
  pthread_t th[MAX_RANKS];
  int r, e, total = 0;
  watchdog("devapi", 60);
  g_n = parse_ranks(argc, argv, 1, MAX_RANKS);
  CHECK(-1, NULL, ncclGetUniqueId(&g_id));
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
  printf("devapi: %d ranks: %d checks OK\n", g_n, total);
  return 0;
}
