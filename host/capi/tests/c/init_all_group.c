/* Several ranks driven by one thread: ncclCommInitAll makes NRANKS communicators, then
 * every collective runs as one group (ncclGroupStart; one call per communicator;
 * ncclGroupEnd) and is checked against the host reference: all-reduce (sum, and avg in a
 * nested group), broadcast, reduce, all-gather, reduce-scatter, all-to-all, gather,
 * scatter, a send/recv ring. Then ncclCommSplit in a group (colors even/odd by rank, keys
 * reversing the order, the last rank NCCL_SPLIT_NOCOLOR and given NULL) and a grouped
 * all-reduce on each half; a second set of communicators from ncclCommInitAll with an
 * explicit device list (all on device 0), and a third from ncclCommInitRank called NRANKS
 * times inside one group. Everything is finalized in a group and destroyed.
 *
 * usage: init_all_group NRANKS (1..8) */
#include "common.h"

static int g_n;
static unsigned long g_checked;
static int g_groups;

enum coll { ALLREDUCE, AVG_NESTED, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, GATHER, SCATTER, RING, NUM_COLLS };
static const char *const NAMES[NUM_COLLS] = {"allreduce sum", "allreduce avg (nested group)", "broadcast", "reduce max",
                                             "allgather", "reducescatter sum", "alltoall", "gather", "scatter",
                                             "sendrecv ring"};

static void fail_case(const char *what, ncclDataType_t t, size_t count, int rank, const char *why) {
  fail(rank, "%s %s count=%zu: %s", what, type_name(t), count, why);
}

/* One collective over the n communicators `comms` (rank r of each is comms[r]), grouped. */
static void grouped(ncclComm_t *comms, int n, enum coll c, ncclDataType_t t, size_t count, uint64_t seed) {
  size_t es = type_size(t), bytes = count * es, nb = (size_t)n * bytes, i;
  unsigned char *send[MAX_RANKS], *recv[MAX_RANKS];
  uint64_t rs[MAX_RANKS];
  ncclRedOp_t red = c == REDUCE ? ncclMax : c == AVG_NESTED ? ncclAvg : ncclSum;
  enum domain d = (c == ALLREDUCE || c == AVG_NESTED || c == REDUCESCATTER) ? DOM_SUM : DOM_ANY;
  int root = (int)(seed % (uint64_t)n), r, q;
  size_t in_elems = (c == REDUCESCATTER || c == ALLTOALL || c == SCATTER) ? (size_t)n * count : count;
  size_t out_bytes = (c == ALLGATHER || c == ALLTOALL || c == GATHER) ? nb : bytes;
  char why[200];

  set_stage(-1, "%s %s count=%zu over %d comms", NAMES[c], type_name(t), count, n);
  for (r = 0; r < n; r++) {
    rs[r] = rank_seed(seed, r);
    send[r] = alloc_poisoned(in_elems * es);
    fill_data(t, d, seed, r, send[r], 0, in_elems);
    recv[r] = alloc_poisoned(out_bytes);
  }
  CHECK(-1, NULL, ncclGroupStart());
  if (c == AVG_NESTED)
    CHECK(-1, NULL, ncclGroupStart());
  for (r = 0; r < n; r++) {
    ncclComm_t m = comms[r];
    switch (c) {
    case ALLREDUCE:
    case AVG_NESTED: CHECK(r, m, ncclAllReduce(send[r], recv[r], count, t, red, m, STREAM)); break;
    case BROADCAST: CHECK(r, m, ncclBroadcast(send[r], recv[r], count, t, root, m, STREAM)); break;
    case REDUCE: CHECK(r, m, ncclReduce(send[r], recv[r], count, t, red, root, m, STREAM)); break;
    case ALLGATHER: CHECK(r, m, ncclAllGather(send[r], recv[r], count, t, m, STREAM)); break;
    case REDUCESCATTER: CHECK(r, m, ncclReduceScatter(send[r], recv[r], count, t, red, m, STREAM)); break;
    case ALLTOALL: CHECK(r, m, ncclAlltoAll(send[r], recv[r], count, t, m, STREAM)); break;
    case GATHER: CHECK(r, m, ncclGather(send[r], recv[r], count, t, root, m, STREAM)); break;
    case SCATTER: CHECK(r, m, ncclScatter(send[r], recv[r], count, t, root, m, STREAM)); break;
    case RING:
      CHECK(r, m, ncclSend(send[r], count, t, (r + 1) % n, m, STREAM));
      CHECK(r, m, ncclRecv(recv[r], count, t, (r + n - 1) % n, m, STREAM));
      break;
    default: break;
    }
  }
  if (c == AVG_NESTED)
    CHECK(-1, NULL, ncclGroupEnd());
  CHECK(-1, NULL, ncclGroupEnd());
  g_groups++;

  for (r = 0; r < n; r++) {
    const unsigned char *o = recv[r];
    switch (c) {
    case ALLREDUCE:
    case AVG_NESTED:
    case REDUCE:
    case REDUCESCATTER: {
      size_t first = c == REDUCESCATTER ? (size_t)r * count : 0;
      if (c == REDUCE && r != root) {
        if (first_unpoisoned(o, 0, bytes + GUARD) != bytes + GUARD)
          fail_case(NAMES[c], t, count, r, "a non-root's recvbuff was written");
        break;
      }
      for (i = 0; i < count; i++) {
        int64_t ref = ref_reduce(t, red, 0, rs, n, first + i);
        if (!check_reduced(t, red, n, ref, o, i, why, sizeof why)) {
          char msg[260];
          snprintf(msg, sizeof msg, "element %zu: %s", i, why);
          fail_case(NAMES[c], t, count, r, msg);
        }
      }
      g_checked += count;
      break;
    }
    case BROADCAST:
    case RING:
      if (!check_data(t, d, seed, c == RING ? (r + n - 1) % n : root, o, 0, count, why, sizeof why))
        fail_case(NAMES[c], t, count, r, why);
      g_checked += count;
      break;
    case ALLGATHER:
    case ALLTOALL:
    case GATHER:
      if (c == GATHER && r != root) {
        if (first_unpoisoned(o, 0, nb + GUARD) != nb + GUARD)
          fail_case(NAMES[c], t, count, r, "a non-root's recvbuff was written");
        break;
      }
      for (q = 0; q < n; q++)
        if (!check_data(t, d, seed, q, o + (size_t)q * bytes, c == ALLTOALL ? (size_t)r * count : 0, count, why,
                        sizeof why))
          fail_case(NAMES[c], t, count, r, why);
      g_checked += (size_t)n * count;
      break;
    case SCATTER:
      if (!check_data(t, d, seed, root, o, (size_t)r * count, count, why, sizeof why))
        fail_case(NAMES[c], t, count, r, why);
      g_checked += count;
      break;
    default: break;
    }
    if (first_unpoisoned(o, out_bytes, out_bytes + GUARD) != out_bytes + GUARD)
      fail_case(NAMES[c], t, count, r, "bytes past the end of recvbuff were written");
    if (!check_data(t, d, seed, r, send[r], 0, in_elems, why, sizeof why))
      fail_case(NAMES[c], t, count, r, "sendbuff changed");
    free(send[r]);
    free(recv[r]);
  }
}

/* Count and rank of each communicator: comms[r] is rank r of n. */
static void check_ranks(ncclComm_t *comms, int n, const char *what) {
  int r, count, me;
  for (r = 0; r < n; r++) {
    if (!comms[r])
      fail(r, "%s: NULL comm", what);
    CHECK(r, comms[r], ncclCommCount(comms[r], &count));
    CHECK(r, comms[r], ncclCommUserRank(comms[r], &me));
    if (count != n || me != r)
      fail(r, "%s: ncclCommCount %d, ncclCommUserRank %d; want %d, %d", what, count, me, n, r);
  }
}

static void all_collectives(ncclComm_t *comms, int n) {
  static const size_t COUNTS[] = {0, 1, 7, 1000, 65537};
  static const ncclDataType_t TYPES[] = {ncclFloat32, ncclInt64, ncclBfloat16, ncclUint8, ncclInt32, ncclFloat16};
  size_t ci;
  int c;
  uint64_t seed = 1;
  for (ci = 0; ci < sizeof COUNTS / sizeof COUNTS[0]; ci++)
    for (c = 0; c < NUM_COLLS; c++) {
      ncclDataType_t t = TYPES[(ci + (size_t)c) % (sizeof TYPES / sizeof TYPES[0])];
      grouped(comms, n, (enum coll)c, t, COUNTS[ci], mix64(seed++));
    }
}

static void finalize_destroy(ncclComm_t *comms, int n, const char *what) {
  int r;
  set_stage(-1, "%s: grouped ncclCommFinalize", what);
  CHECK(-1, NULL, ncclGroupStart());
  for (r = 0; r < n; r++)
    if (comms[r])
      CHECK(r, comms[r], ncclCommFinalize(comms[r]));
  CHECK(-1, NULL, ncclGroupEnd());
  set_stage(-1, "%s: ncclCommDestroy", what);
  for (r = 0; r < n; r++)
    if (comms[r])
      CHECK(r, comms[r], ncclCommDestroy(comms[r]));
}

static void split(ncclComm_t *comms, int n) {
  ncclComm_t sub[MAX_RANKS], half[2][MAX_RANKS];
  int color[MAX_RANKS], size[2] = {0, 0}, r, count, me, k;
  for (r = 0; r < n; r++)
    color[r] = (n > 1 && r == n - 1) ? NCCL_SPLIT_NOCOLOR : r % 2;
  for (r = 0; r < n; r++)
    if (color[r] != NCCL_SPLIT_NOCOLOR)
      size[color[r]]++;
  set_stage(-1, "grouped ncclCommSplit");
  CHECK(-1, NULL, ncclGroupStart());
  for (r = 0; r < n; r++) {
    sub[r] = (ncclComm_t)(uintptr_t)0x1; /* must be overwritten, with NULL for NOCOLOR */
    CHECK(r, comms[r], ncclCommSplit(comms[r], color[r], n - r, &sub[r], NULL));
  }
  CHECK(-1, NULL, ncclGroupEnd());
  /* Keys n - r: the new ranks are in reverse parent order within each color. */
  for (r = 0; r < n; r++) {
    if (color[r] == NCCL_SPLIT_NOCOLOR) {
      if (sub[r] != NULL)
        fail(r, "ncclCommSplit with NCCL_SPLIT_NOCOLOR gave a comm, want NULL");
      continue;
    }
    if (!sub[r])
      fail(r, "ncclCommSplit (color %d) gave NULL", color[r]);
    CHECK(r, sub[r], ncclCommCount(sub[r], &count));
    CHECK(r, sub[r], ncclCommUserRank(sub[r], &me));
    /* Members of my color after me in parent order come first. */
    {
      int want = 0, q;
      for (q = r + 1; q < n; q++)
        if (color[q] == color[r])
          want++;
      if (count != size[color[r]] || me != want)
        fail(r, "split color %d: ncclCommCount %d, ncclCommUserRank %d; want %d, %d", color[r], count, me,
             size[color[r]], want);
      half[color[r]][want] = sub[r];
    }
  }
  /* Each half's all-reduce, grouped over its members, checked as a communicator of its own. */
  for (k = 0; k < 2; k++)
    if (size[k])
      grouped(half[k], size[k], ALLREDUCE, ncclInt32, 1000 + (size_t)k, mix64(0x5b117 + (uint64_t)k));
  finalize_destroy(sub, n, "split communicators");
}

int main(int argc, char **argv) {
  ncclComm_t comms[MAX_RANKS], more[MAX_RANKS];
  int devs[MAX_RANKS], r;
  ncclUniqueId id;

  watchdog("init_all_group", 60);
  g_n = parse_ranks(argc, argv, 1, MAX_RANKS);

  set_stage(-1, "ncclCommInitAll");
  memset(comms, 0, sizeof comms);
  CHECK(-1, NULL, ncclCommInitAll(comms, g_n, NULL));
  check_ranks(comms, g_n, "ncclCommInitAll");
  all_collectives(comms, g_n);
  split(comms, g_n);
  finalize_destroy(comms, g_n, "ncclCommInitAll communicators");

  /* ncclCommInitAll with a device list: every rank on device 0. */
  for (r = 0; r < g_n; r++)
    devs[r] = 0;
  set_stage(-1, "ncclCommInitAll with a device list");
  CHECK(-1, NULL, ncclCommInitAll(more, g_n, devs));
  check_ranks(more, g_n, "ncclCommInitAll(devlist)");
  grouped(more, g_n, ALLREDUCE, ncclFloat32, 4099, 77);
  grouped(more, g_n, RING, ncclInt8, 333, 78);
  finalize_destroy(more, g_n, "ncclCommInitAll(devlist) communicators");

  /* One thread, every rank's ncclCommInitRank in one group. */
  set_stage(-1, "grouped ncclCommInitRank");
  CHECK(-1, NULL, ncclGetUniqueId(&id));
  CHECK(-1, NULL, ncclGroupStart());
  for (r = 0; r < g_n; r++)
    CHECK(r, NULL, ncclCommInitRank(&more[r], g_n, id, r));
  CHECK(-1, NULL, ncclGroupEnd());
  check_ranks(more, g_n, "grouped ncclCommInitRank");
  grouped(more, g_n, ALLREDUCE, ncclFloat64, 1001, 79);
  grouped(more, g_n, ALLGATHER, ncclUint32, 257, 80);
  finalize_destroy(more, g_n, "grouped ncclCommInitRank communicators");

  printf("init_all_group: %d ranks: %d groups, %lu output elements checked: OK\n", g_n, g_groups, g_checked);
  return 0;
}
