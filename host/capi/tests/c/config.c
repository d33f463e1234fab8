/* ncclConfig_t through ncclCommInitRankConfig, as callers built against different nccl.h
 * versions pass it (NCCL's rule: size, magic and version tell what the caller has). Each
 * case makes a communicator of NRANKS ranks (threads), runs an all-reduce on it (checked)
 * and destroys it:
 *
 * (a) NCCL_CONFIG_INITIALIZER of our header (2.29), with valid values set;
 * (b) an older caller: NCCL 2.17's ncclConfig_t (size, magic, version, blocking,
 *     cgaClusterSize, minCTAs, maxCTAs, netName, splitShare: 48 bytes), version 2.17.1,
 *     followed in memory by bytes that would be invalid values were they read as the newer
 *     fields; and, as a control, the same bytes claiming the current size and version must
 *     be refused (so the bytes are invalid and the size is what kept them unread);
 * (c) a newer caller: the current layout followed by fields unknown to us (garbage), size
 *     larger, version 2.31.0;
 * (d) refused configs: bad magic, a size below the header, invalid blocking / maxCTAs /
 *     minCTAs > maxCTAs / collnetEnable values: ncclInvalidArgument with a message;
 * (e) non-blocking (blocking = 0): init returns ncclSuccess or ncclInProgress, and
 *     ncclCommGetAsyncError is polled until ncclSuccess (bounded); then a collective, a
 *     non-blocking ncclCommSplit (polled the same way) and a non-blocking ncclCommFinalize
 *     (polled) before destroy.
 *
 * usage: config NRANKS (1..8) */
#include "common.h"

#include <stddef.h>
#include <time.h>

/* NCCL 2.17's ncclConfig_t (nccl.h of 2.17.1). */
struct config_v21700 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
};

/* An older caller's struct with what follows it in its memory. */
struct older_caller {
  struct config_v21700 cfg;
  unsigned char after[64];
};

/* A newer caller's: our layout, then fields of a future version. */
struct newer_caller {
  ncclConfig_t cfg;
  int futureInt;
  int futureFlags;
  const char *futureName;
  unsigned char futureBytes[40];
};

static int g_n;
static ncclUniqueId g_id;
static const char *g_case = "";
static int g_cases;
/* Non-blocking inits that returned ncclInProgress. */
static int g_in_progress;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

struct job {
  int rank;
  void *config; /* this rank's ncclConfig_t, of whichever version */
  int nonblocking;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Poll ncclCommGetAsyncError until it is no longer ncclInProgress (at most 30 s). */
static void wait_ready(int rank, ncclComm_t comm, const char *what) {
  double t0 = now_s();
  ncclResult_t st = ncclInProgress;
  do {
    CHECK(rank, comm, ncclCommGetAsyncError(comm, &st));
    if (st == ncclInProgress) {
      if (now_s() - t0 > 30)
        fail(rank, "%s: %s still in progress after 30 s", g_case, what);
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
  } while (st == ncclInProgress);
  if (st != ncclSuccess)
    fail(rank, "%s: %s ended with %d (%s): %s", g_case, what, (int)st, ncclGetErrorString(st),
         last_error(comm));
}

/* Accept ncclSuccess or, non-blocking, ncclInProgress. */
#define CHECK_NB(rank, comm, nb, call)                                                       \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess && !((nb) && r_ == ncclInProgress))                                \
      fail((rank), "%s: %s:%d: %s returned %d (%s); last error: %s", g_case, __FILE__, __LINE__, \
           #call, (int)r_, ncclGetErrorString(r_), last_error(comm));                        \
  } while (0)

/* Sum all-reduce of rank-dependent int32 data, checked. */
static void allreduce_check(int rank, ncclComm_t comm, int n) {
  int32_t send[5], recv[5];
  int i;
  for (i = 0; i < 5; i++) {
    send[i] = (rank + 1) * (i + 1);
    recv[i] = -1;
  }
  CHECK(rank, comm, ncclAllReduce(send, recv, 5, ncclInt32, ncclSum, comm, STREAM));
  for (i = 0; i < 5; i++)
    if (recv[i] != n * (n + 1) / 2 * (i + 1))
      fail(rank, "%s: all-reduce element %d: got %d, want %d", g_case, i, recv[i], n * (n + 1) / 2 * (i + 1));
}

static void *rank_main(void *arg) {
  struct job *j = arg;
  int r = j->rank, count = -1, me = -1;
  ncclComm_t comm = NULL, sub = NULL;

  set_stage(r, "%s: ncclCommInitRankConfig", g_case);
  {
    ncclResult_t res = ncclCommInitRankConfig(&comm, g_n, g_id, r, (ncclConfig_t *)j->config);
    CHECK_NB(r, NULL, j->nonblocking, res);
    if (res == ncclInProgress) {
      pthread_mutex_lock(&g_lock);
      g_in_progress++;
      pthread_mutex_unlock(&g_lock);
    }
  }
  if (!comm)
    fail(r, "%s: ncclCommInitRankConfig gave a NULL comm", g_case);
  if (j->nonblocking)
    wait_ready(r, comm, "the non-blocking init");
  CHECK(r, comm, ncclCommCount(comm, &count));
  CHECK(r, comm, ncclCommUserRank(comm, &me));
  if (count != g_n || me != r)
    fail(r, "%s: ncclCommCount %d, ncclCommUserRank %d; want %d, %d", g_case, count, me, g_n, r);
  set_stage(r, "%s: all-reduce", g_case);
  allreduce_check(r, comm, g_n);

  if (j->nonblocking) {
    /* A split with the caller's (non-blocking) config: every rank in one color, reversed. */
    set_stage(r, "%s: ncclCommSplit", g_case);
    CHECK_NB(r, comm, 1, ncclCommSplit(comm, 0, g_n - r, &sub, (ncclConfig_t *)j->config));
    if (!sub)
      fail(r, "%s: ncclCommSplit gave a NULL comm", g_case);
    wait_ready(r, sub, "the non-blocking split");
    CHECK(r, sub, ncclCommUserRank(sub, &me));
    if (me != g_n - 1 - r)
      fail(r, "%s: rank %d in the reversed split, want %d", g_case, me, g_n - 1 - r);
    allreduce_check(me, sub, g_n);
    CHECK_NB(r, sub, 1, ncclCommFinalize(sub));
    wait_ready(r, sub, "the non-blocking finalize of the split");
    CHECK(r, sub, ncclCommDestroy(sub));
  }

  set_stage(r, "%s: ncclCommFinalize", g_case);
  CHECK_NB(r, comm, j->nonblocking, ncclCommFinalize(comm));
  if (j->nonblocking)
    wait_ready(r, comm, "the non-blocking finalize");
  set_stage(r, "%s: ncclCommDestroy", g_case);
  CHECK(r, comm, ncclCommDestroy(comm));
  set_stage(r, "%s: done", g_case);
  return NULL;
}

/* Run a communicator with each rank's config made by `make(rank, storage)`. */
static void run_case(const char *name, void *(*make)(int, void *), size_t storage_size, int nonblocking) {
  pthread_t th[MAX_RANKS];
  struct job jobs[MAX_RANKS];
  void *storage[MAX_RANKS];
  int r, e;
  g_case = name;
  set_stage(-1, "%s: ncclGetUniqueId", name);
  CHECK(-1, NULL, ncclGetUniqueId(&g_id));
  for (r = 0; r < g_n; r++) {
    storage[r] = malloc(storage_size);
    if (!storage[r])
      fail(-1, "out of memory");
    jobs[r].rank = r;
    jobs[r].config = make(r, storage[r]);
    jobs[r].nonblocking = nonblocking;
  }
  for (r = 0; r < g_n; r++)
    if ((e = pthread_create(&th[r], NULL, rank_main, &jobs[r])))
      fail(r, "pthread_create: %d", e);
  set_stage(-1, "%s: joining", name);
  for (r = 0; r < g_n; r++)
    pthread_join(th[r], NULL);
  for (r = 0; r < g_n; r++)
    free(storage[r]);
  if (nonblocking)
    printf("config: %s: OK (%d of %d inits returned ncclInProgress)\n", name, g_in_progress, g_n);
  else
    printf("config: %s: OK\n", name);
  g_cases++;
}

static char g_names[MAX_RANKS][32];

static void *make_current(int rank, void *p) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER, *c = p;
  *c = init;
  snprintf(g_names[rank], sizeof g_names[rank], "ctest-current-%d", rank);
  c->blocking = 1;
  c->cgaClusterSize = 2;
  c->minCTAs = 1;
  c->maxCTAs = 16;
  c->splitShare = 0;
  c->commName = g_names[rank];
  c->collnetEnable = 0;
  c->CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
  return c;
}

/* Old-caller bytes: 0xff everywhere (padding and what follows are garbage), then the 2.17
 * fields. */
static void fill_older(struct older_caller *o) {
  memset(o, 0xff, sizeof *o);
  o->cfg.size = sizeof(struct config_v21700);
  o->cfg.magic = NCCL_API_MAGIC;
  o->cfg.version = NCCL_VERSION(2, 17, 1);
  o->cfg.blocking = 1;
  o->cfg.cgaClusterSize = 4;
  o->cfg.minCTAs = 2;
  o->cfg.maxCTAs = 8;
  o->cfg.netName = NULL;
  o->cfg.splitShare = 1;
}

static void *make_older(int rank, void *p) {
  (void)rank;
  fill_older(p);
  return p;
}

static void *make_newer(int rank, void *p) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  struct newer_caller *n = p;
  (void)rank;
  memset(n, 0xff, sizeof *n);
  n->cfg = init;
  n->cfg.size = sizeof *n;
  n->cfg.version = NCCL_VERSION(2, 31, 0);
  n->cfg.blocking = 1;
  n->cfg.maxCTAs = 4;
  n->cfg.trafficClass = 0;
  n->futureInt = -12345;
  n->futureFlags = 0x7fffffff;
  n->futureName = (const char *)(uintptr_t)0x10; /* must never be read */
  return n;
}

static void *make_nonblocking(int rank, void *p) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER, *c = p;
  *c = init;
  snprintf(g_names[rank], sizeof g_names[rank], "ctest-nonblocking-%d", rank);
  c->blocking = 0;
  c->commName = g_names[rank];
  return c;
}

/* Refused configs: one rank, each must be ncclInvalidArgument naming the problem. */
static void refused(void) {
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER, c;
  struct older_caller o;
  ncclUniqueId id;
  ncclComm_t comm;
  int i;
  const char *m;
  static const struct {
    const char *what, *needle;
    int field; /* 0 magic, 1 size, 2 blocking, 3 maxCTAs, 4 minCTAs > maxCTAs, 5 collnetEnable, 6 CTAPolicy */
  } CASES[] = {{"bad magic", "magic", 0},
               {"size below the header", "size", 1},
               {"blocking = 5", "blocking", 2},
               {"maxCTAs = 0", "maxCTAs", 3},
               {"minCTAs > maxCTAs", "minCTAs", 4},
               {"collnetEnable = 7", "collnetEnable", 5},
               {"CTAPolicy = 99", "CTAPolicy", 6}};
  g_case = "refused configs";
  CHECK(-1, NULL, ncclGetUniqueId(&id));
  for (i = 0; i < (int)(sizeof CASES / sizeof CASES[0]); i++) {
    ncclResult_t res;
    c = init;
    switch (CASES[i].field) {
    case 0: c.magic = 0xdeadbeef; break;
    case 1: c.size = 8; break;
    case 2: c.blocking = 5; break;
    case 3: c.maxCTAs = 0; break;
    case 4: c.minCTAs = 8; c.maxCTAs = 4; break;
    case 5: c.collnetEnable = 7; break;
    default: c.CTAPolicy = 99; break;
    }
    comm = NULL;
    set_stage(-1, "refused config: %s", CASES[i].what);
    res = ncclCommInitRankConfig(&comm, 1, id, 0, &c);
    m = last_error(NULL);
    if (res != ncclInvalidArgument)
      fail(-1, "config with %s: ncclCommInitRankConfig returned %d (%s), want %d; last error: %s", CASES[i].what,
           (int)res, ncclGetErrorString(res), (int)ncclInvalidArgument, m);
    if (!strstr(m, CASES[i].needle))
      fail(-1, "config with %s: the message \"%s\" does not mention %s", CASES[i].what, m, CASES[i].needle);
    if (comm)
      fail(-1, "config with %s: a comm was returned", CASES[i].what);
  }
  /* The control of (b): the older caller's bytes read as a current struct are refused. */
  fill_older(&o);
  o.cfg.size = sizeof(ncclConfig_t);
  o.cfg.version = NCCL_VERSION_CODE;
  comm = NULL;
  if (ncclCommInitRankConfig(&comm, 1, id, 0, (ncclConfig_t *)(void *)&o) != ncclInvalidArgument)
    fail(-1, "the older caller's bytes read as a 2.29 config were accepted: the (b) case shows nothing");
  /* The refused inits left the id usable: a good one-rank init with it works. */
  CHECK(-1, NULL, ncclCommInitRankConfig(&comm, 1, id, 0, &init));
  allreduce_check(0, comm, 1);
  CHECK(-1, comm, ncclCommDestroy(comm));
  printf("config: refused configs (%d and the older-caller control): OK\n",
         (int)(sizeof CASES / sizeof CASES[0]));
  g_cases++;
}

int main(int argc, char **argv) {
  watchdog("config", 60);
  g_n = parse_ranks(argc, argv, 1, MAX_RANKS);
  if (sizeof(struct config_v21700) >= sizeof(ncclConfig_t) ||
      offsetof(struct older_caller, after) != sizeof(struct config_v21700))
    fail(-1, "the 2.17 struct is not smaller than ours (%zu, %zu)", sizeof(struct config_v21700),
         sizeof(ncclConfig_t));
  run_case("(a) NCCL_CONFIG_INITIALIZER (2.29)", make_current, sizeof(ncclConfig_t), 0);
  run_case("(b) an older caller (2.17.1, 48 bytes, garbage after it)", make_older, sizeof(struct older_caller), 0);
  run_case("(c) a newer caller (2.31.0, extra fields)", make_newer, sizeof(struct newer_caller), 0);
  refused();
  run_case("(e) non-blocking (blocking = 0)", make_nonblocking, sizeof(ncclConfig_t), 1);
  printf("config: %d ranks: %d cases OK\n", g_n, g_cases);
  return 0;
}
