/* ncclCommShrink with ranks as threads: the excluded ranks never call it (as if dead), the
 * survivors do, each from its own thread.
 *
 * (a) the last rank excluded, NCCL_SHRINK_DEFAULT, NULL config: new ranks keep their
 *     order; an all-reduce over the survivors is checked;
 * (b) (3 ranks or more) rank 0 excluded while each survivor has an all-reduce stuck
 *     waiting for it (called from a helper thread, which the CPU backend blocks until the
 *     operation ends), NCCL_SHRINK_ABORT, a non-blocking config named "shrunk": the call
 *     returns ncclSuccess or ncclInProgress and ncclCommGetAsyncError is polled until
 *     ready; the stuck all-reduce returns; new rank = parent rank - 1; an all-reduce on the
 *     child is checked; the parent is revoked (a collective on it is ncclInvalidUsage).
 * The excluded ranks wait for the survivors to finish, then everyone destroys.
 *
 * usage: shrink NRANKS (2..8) */
#include "common.h"

#include <time.h>

static int g_n;
static ncclUniqueId g_id;
static pthread_barrier_t g_barrier;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void wait_ready(int rank, ncclComm_t comm, const char *what) {
  double t0 = now_s();
  ncclResult_t st = ncclInProgress;
  do {
    CHECK(rank, comm, ncclCommGetAsyncError(comm, &st));
    if (st == ncclInProgress) {
      struct timespec ts = {0, 200000};
      if (now_s() - t0 > 30)
        fail(rank, "%s still in progress after 30 s", what);
      nanosleep(&ts, NULL);
    }
  } while (st == ncclInProgress);
  if (st != ncclSuccess)
    fail(rank, "%s ended with %d (%s): %s", what, (int)st, ncclGetErrorString(st), last_error(comm));
}

/* An int32 sum all-reduce on `comm` where the member with parent rank p contributes
 * (p + 1) * (i + 1); `parents` lists the members' parent ranks. */
static void check_sum(int rank, ncclComm_t comm, int parent, const int *parents, int n) {
  int32_t send[9], recv[9];
  int i, q;
  for (i = 0; i < 9; i++) {
    send[i] = (parent + 1) * (i + 1);
    recv[i] = -1;
  }
  CHECK(rank, comm, ncclAllReduce(send, recv, 9, ncclInt32, ncclSum, comm, STREAM));
  for (i = 0; i < 9; i++) {
    int32_t want = 0;
    for (q = 0; q < n; q++)
      want += (parents[q] + 1) * (i + 1);
    if (recv[i] != want)
      fail(rank, "all-reduce over the survivors: element %d is %d, want %d", i, recv[i], want);
  }
}

static void check_place(int rank, ncclComm_t child, int want_rank, int want_n, const char *what) {
  int n = -1, me = -1;
  if (!child)
    fail(rank, "%s: ncclCommShrink gave a NULL comm", what);
  CHECK(rank, child, ncclCommCount(child, &n));
  CHECK(rank, child, ncclCommUserRank(child, &me));
  if (n != want_n || me != want_rank)
    fail(rank, "%s: child rank %d of %d, want %d of %d", what, me, n, want_rank, want_n);
}

struct stuck {
  int rank;
  ncclComm_t comm;
  int32_t in, out;
};

/* An all-reduce that rank 0 never joins: returns once the shrink aborts it. */
static void *stuck_main(void *arg) {
  struct stuck *s = arg;
  ncclResult_t res = ncclAllReduce(&s->in, &s->out, 1, ncclInt32, ncclSum, s->comm, STREAM);
  (void)res; /* aborted (or refused, if the abort came first): either ends it */
  return NULL;
}

static void *rank_main(void *arg) {
  int r = (int)(intptr_t)arg, i, parents[MAX_RANKS], np;
  ncclComm_t comm = NULL, child = NULL, child2 = NULL;
  int32_t x = 1, y = 0;

  set_stage(r, "ncclCommInitRank");
  CHECK(r, NULL, ncclCommInitRank(&comm, g_n, g_id, r));

  /* (a) the last rank is excluded and never calls. */
  if (r != g_n - 1) {
    int ex = g_n - 1;
    set_stage(r, "(a) ncclCommShrink excluding rank %d", ex);
    CHECK(r, comm, ncclCommShrink(comm, &ex, 1, &child, NULL, NCCL_SHRINK_DEFAULT));
    check_place(r, child, r, g_n - 1, "(a)");
    for (i = 0, np = 0; i < g_n - 1; i++)
      parents[np++] = i;
    set_stage(r, "(a) all-reduce on the child");
    check_sum(r, child, r, parents, np);
  }
  set_stage(r, "(a) barrier");
  pthread_barrier_wait(&g_barrier);

  /* (b) rank 0 excluded, the survivors' parent work aborted first. */
  if (g_n >= 3 && r != 0) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t res;
    int ex = 0;
    cfg.blocking = 0;
    cfg.commName = "shrunk";
    struct stuck st = {r, comm, 1, 0};
    pthread_t helper;
    struct timespec pause = {0, 100000000};
    set_stage(r, "(b) a collective waiting for rank 0");
    if (pthread_create(&helper, NULL, stuck_main, &st))
      fail(r, "pthread_create");
    nanosleep(&pause, NULL);
    set_stage(r, "(b) ncclCommShrink NCCL_SHRINK_ABORT, non-blocking");
    res = ncclCommShrink(comm, &ex, 1, &child2, &cfg, NCCL_SHRINK_ABORT);
    if (res != ncclSuccess && res != ncclInProgress)
      fail(r, "(b) ncclCommShrink returned %d (%s): %s", (int)res, ncclGetErrorString(res), last_error(comm));
    if (!child2)
      fail(r, "(b) ncclCommShrink gave a NULL comm");
    wait_ready(r, child2, "(b) the non-blocking shrink");
    set_stage(r, "(b) joining the aborted all-reduce's thread");
    pthread_join(helper, NULL);
    check_place(r, child2, r - 1, g_n - 1, "(b)");
    for (i = 1, np = 0; i < g_n; i++)
      parents[np++] = i;
    set_stage(r, "(b) all-reduce on the child");
    check_sum(r, child2, r, parents, np);
    /* The parent was revoked by the abort. */
    if (ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, comm, STREAM) != ncclInvalidUsage)
      fail(r, "(b) a collective on the aborted parent did not return ncclInvalidUsage");
    if (!strstr(last_error(comm), "revoked"))
      fail(r, "(b) the message \"%s\" does not say the parent was revoked", last_error(comm));
  }
  set_stage(r, "(b) barrier");
  pthread_barrier_wait(&g_barrier);

  set_stage(r, "ncclCommDestroy");
  if (child2)
    CHECK(r, child2, ncclCommDestroy(child2));
  if (child)
    CHECK(r, child, ncclCommDestroy(child));
  CHECK(r, comm, ncclCommAbort(comm));
  set_stage(r, "done");
  return NULL;
}

int main(int argc, char **argv) {
  pthread_t th[MAX_RANKS];
  int r, e;
  watchdog("shrink", 60);
  g_n = parse_ranks(argc, argv, 2, MAX_RANKS);
  CHECK(-1, NULL, ncclGetUniqueId(&g_id));
  if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_n))
    fail(-1, "pthread_barrier_init");
  for (r = 0; r < g_n; r++)
    if ((e = pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r)))
      fail(r, "pthread_create: %d", e);
  set_stage(-1, "joining the rank threads");
  for (r = 0; r < g_n; r++)
    pthread_join(th[r], NULL);
  pthread_barrier_destroy(&g_barrier);
  printf("shrink: %d ranks: (a) last rank excluded%s: OK\n", g_n,
         g_n >= 3 ? ", (b) rank 0 excluded with NCCL_SHRINK_ABORT, non-blocking" : "");
  return 0;
}
