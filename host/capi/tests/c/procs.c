/* Ranks as processes: the parent fork()s NRANKS children before touching the library
 * (it never calls it: no library thread exists at fork time); child 0 calls ncclGetUniqueId
 * and passes the id through a pipe to the others; every child calls ncclCommInitRank and
 * runs every collective: all-reduce (sum out of place, max in place), all-gather,
 * broadcast, reduce (sum), reduce-scatter (sum), ncclAlltoAll, gather and scatter (roots
 * rotating), and a send/recv ring in a group, for int32, float32, bfloat16, int64 and uint8
 * and counts 0, 1, 7, 65537 and 262147 (1 MiB of 4-byte elements; those two types only),
 * each output element checked against the host reference, each output poisoned first and
 * each input checked unchanged. Then finalize and destroy. The parent waits for all of them with a 60 s alarm, kills the rest
 * on the first failure or on the alarm, and fails unless every child exited 0.
 *
 * usage: procs NRANKS (1..8) */
#include "common.h"

#include <errno.h>
#include <sys/types.h>
#include <sys/wait.h>

static int g_n, g_rank;
static unsigned long g_cases, g_checked;
static pid_t g_pids[MAX_RANKS];

enum coll {
  ALLREDUCE_SUM,
  ALLREDUCE_MAX_INPLACE,
  ALLGATHER,
  BROADCAST,
  RING,
  REDUCE,
  REDUCESCATTER,
  ALLTOALL,
  GATHER,
  SCATTER,
  NUM_COLLS
};
static const char *const NAMES[NUM_COLLS] = {"allreduce sum", "allreduce max in-place", "allgather", "broadcast",
                                             "sendrecv ring", "reduce sum", "reducescatter sum", "alltoall",
                                             "gather", "scatter"};

static void read_all(int fd, void *buf, size_t len) {
  unsigned char *p = buf;
  while (len) {
    ssize_t k = read(fd, p, len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      fail(g_rank, "reading the unique id from the pipe: %s", k == 0 ? "end of file" : strerror(errno));
    p += k;
    len -= (size_t)k;
  }
}

static void write_all(int fd, const void *buf, size_t len) {
  const unsigned char *p = buf;
  while (len) {
    ssize_t k = write(fd, p, len);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      fail(g_rank, "writing the unique id to the pipe: %s", strerror(errno));
    p += k;
    len -= (size_t)k;
  }
}

static void one_case(ncclComm_t comm, enum coll c, ncclDataType_t t, size_t count, uint64_t seed, int root) {
  int r = g_rank, n = g_n, q;
  size_t es = type_size(t), bytes = count * es, nb = (size_t)n * bytes, i;
  /* Elements of the input, bytes of the output (NCCL's counts: per rank, or per block). */
  size_t in_elems = (c == REDUCESCATTER || c == ALLTOALL || c == SCATTER) ? (size_t)n * count : count;
  size_t out = (c == ALLGATHER || c == ALLTOALL || c == GATHER) ? nb : bytes;
  int summed = c == ALLREDUCE_SUM || c == REDUCE || c == REDUCESCATTER;
  enum domain d = summed ? DOM_SUM : DOM_ANY;
  ncclRedOp_t red = summed ? ncclSum : ncclMax;
  unsigned char *send = alloc_poisoned(in_elems * es), *recv;
  uint64_t rs[MAX_RANKS];
  char why[200];

  set_stage(r, "%s %s count=%zu root=%d", NAMES[c], type_name(t), count, root);
  fill_data(t, d, seed, r, send, 0, in_elems);
  recv = c == ALLREDUCE_MAX_INPLACE ? send : alloc_poisoned(out);
  for (q = 0; q < n; q++)
    rs[q] = rank_seed(seed, q);
  switch (c) {
  case ALLREDUCE_SUM:
  case ALLREDUCE_MAX_INPLACE: CHECK(r, comm, ncclAllReduce(send, recv, count, t, red, comm, STREAM)); break;
  case ALLGATHER: CHECK(r, comm, ncclAllGather(send, recv, count, t, comm, STREAM)); break;
  case BROADCAST: CHECK(r, comm, ncclBroadcast(send, recv, count, t, root, comm, STREAM)); break;
  case RING:
    CHECK(r, comm, ncclGroupStart());
    CHECK(r, comm, ncclRecv(recv, count, t, (r + n - 1) % n, comm, STREAM));
    CHECK(r, comm, ncclSend(send, count, t, (r + 1) % n, comm, STREAM));
    CHECK(r, comm, ncclGroupEnd());
    break;
  case REDUCE: CHECK(r, comm, ncclReduce(send, recv, count, t, red, root, comm, STREAM)); break;
  case REDUCESCATTER: CHECK(r, comm, ncclReduceScatter(send, recv, count, t, red, comm, STREAM)); break;
  case ALLTOALL: CHECK(r, comm, ncclAlltoAll(send, recv, count, t, comm, STREAM)); break;
  case GATHER: CHECK(r, comm, ncclGather(send, recv, count, t, root, comm, STREAM)); break;
  case SCATTER: CHECK(r, comm, ncclScatter(send, recv, count, t, root, comm, STREAM)); break;
  default: break;
  }
  switch (c) {
  case ALLREDUCE_SUM:
  case ALLREDUCE_MAX_INPLACE:
  case REDUCE:
  case REDUCESCATTER:
    if (c == REDUCE && r != root)
      break; /* only the root's recvbuff is written */
    for (i = 0; i < count; i++) {
      /* Reduce-scatter: this rank's block of every rank's input. */
      size_t at = c == REDUCESCATTER ? (size_t)r * count + i : i;
      int64_t ref = ref_reduce(t, red, 0, rs, n, at);
      if (!check_reduced(t, red, n, ref, recv, i, why, sizeof why))
        fail(r, "%s %s count=%zu: element %zu: %s", NAMES[c], type_name(t), count, i, why);
    }
    break;
  case ALLGATHER:
  case GATHER:
    if (c == GATHER && r != root)
      break;
    for (q = 0; q < n; q++)
      if (!check_data(t, d, seed, q, recv + (size_t)q * bytes, 0, count, why, sizeof why))
        fail(r, "%s %s count=%zu: block %d: %s", NAMES[c], type_name(t), count, q, why);
    break;
  case ALLTOALL:
    /* Block q: block r of rank q's input. */
    for (q = 0; q < n; q++)
      if (!check_data(t, d, seed, q, recv + (size_t)q * bytes, (size_t)r * count, count, why, sizeof why))
        fail(r, "%s %s count=%zu: block %d: %s", NAMES[c], type_name(t), count, q, why);
    break;
  case SCATTER:
    if (!check_data(t, d, seed, root, recv, (size_t)r * count, count, why, sizeof why))
      fail(r, "%s %s count=%zu root=%d: %s", NAMES[c], type_name(t), count, root, why);
    break;
  case BROADCAST:
  case RING:
    if (!check_data(t, d, seed, c == RING ? (r + n - 1) % n : root, recv, 0, count, why, sizeof why))
      fail(r, "%s %s count=%zu root=%d: %s", NAMES[c], type_name(t), count, root, why);
    break;
  default: break;
  }
  if (first_unpoisoned(recv, out, out + GUARD) != out + GUARD)
    fail(r, "%s %s count=%zu: bytes past the end of recvbuff were written", NAMES[c], type_name(t), count);
  if (recv != send && !check_data(t, d, seed, r, send, 0, in_elems, why, sizeof why))
    fail(r, "%s %s count=%zu: sendbuff changed: %s", NAMES[c], type_name(t), count, why);
  g_cases++;
  g_checked += (c == ALLGATHER || c == ALLTOALL || (c == GATHER && r == root)) ? (size_t)n * count
               : (c == REDUCE || c == GATHER) && r != root                      ? 0
                                                                                 : count;
  if (recv != send)
    free(recv);
  free(send);
}

static int child(int rank, int fd_read, int fd_write) {
  static const ncclDataType_t TYPES[] = {ncclInt32, ncclFloat32, ncclBfloat16, ncclInt64, ncclUint8};
  static const size_t COUNTS[] = {0, 1, 7, 65537, 262147};
  char name[32];
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  int count = -1, me = -1, q, c;
  size_t ti, ci;
  unsigned long caseno = 0;

  g_rank = rank;
  snprintf(name, sizeof name, "procs rank %d", rank);
  watchdog(strdup(name), 55);
  set_stage(rank, "getting the unique id");
  if (rank == 0) {
    CHECK(rank, NULL, ncclGetUniqueId(&id));
    for (q = 1; q < g_n; q++)
      write_all(fd_write, &id, sizeof id);
  } else {
    read_all(fd_read, &id, sizeof id);
  }
  close(fd_read);
  close(fd_write);

  set_stage(rank, "ncclCommInitRank");
  CHECK(rank, NULL, ncclCommInitRank(&comm, g_n, id, rank));
  CHECK(rank, comm, ncclCommCount(comm, &count));
  CHECK(rank, comm, ncclCommUserRank(comm, &me));
  if (count != g_n || me != rank)
    fail(rank, "ncclCommCount %d, ncclCommUserRank %d; want %d, %d", count, me, g_n, rank);

  for (ci = 0; ci < sizeof COUNTS / sizeof COUNTS[0]; ci++)
    for (ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
      ncclDataType_t t = TYPES[ti];
      if (COUNTS[ci] > 65537 && t != ncclInt32 && t != ncclFloat32)
        continue;
      for (c = 0; c < NUM_COLLS; c++) {
        caseno++;
        one_case(comm, (enum coll)c, t, COUNTS[ci], mix64(0xf0f0 + caseno), (int)(caseno % (unsigned long)g_n));
      }
    }

  set_stage(rank, "ncclCommFinalize");
  CHECK(rank, comm, ncclCommFinalize(comm));
  set_stage(rank, "ncclCommDestroy");
  CHECK(rank, comm, ncclCommDestroy(comm));
  printf("procs: rank %d (pid %ld): %lu cases, %lu output elements checked: OK\n", rank, (long)getpid(), g_cases,
         g_checked);
  fflush(stdout);
  return 0;
}

static void kill_children(void) {
  int r;
  for (r = 0; r < g_n; r++)
    if (g_pids[r] > 0)
      kill(g_pids[r], SIGKILL);
}

static void parent_alarm(int sig) {
  static const char msg[] = "procs: FAIL: a child did not finish within 60 s (killed)\n";
  (void)sig;
  kill_children();
  if (write(2, msg, sizeof msg - 1) < 0)
    _exit(124);
  _exit(124);
}

int main(int argc, char **argv) {
  int fds[2], r, failed = 0, left;
  struct sigaction sa;

  g_prog = "procs";
  g_n = parse_ranks(argc, argv, 1, MAX_RANKS);
  if (pipe(fds))
    fail(-1, "pipe: %s", strerror(errno));
  fflush(stdout);
  for (r = 0; r < g_n; r++) {
    pid_t p = fork();
    if (p < 0) {
      kill_children();
      fail(-1, "fork: %s", strerror(errno));
    }
    if (p == 0)
      _exit(child(r, fds[0], fds[1]));
    g_pids[r] = p;
  }
  close(fds[0]);
  close(fds[1]);

  memset(&sa, 0, sizeof sa);
  sa.sa_handler = parent_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm(60);
  for (left = g_n; left > 0; left--) {
    int status, k;
    pid_t p = waitpid(-1, &status, 0);
    if (p < 0) {
      if (errno == EINTR) {
        left++;
        continue;
      }
      kill_children();
      fail(-1, "waitpid: %s", strerror(errno));
    }
    for (k = 0; k < g_n; k++)
      if (g_pids[k] == p)
        g_pids[k] = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
      continue;
    if (!failed) {
      if (WIFEXITED(status))
        fprintf(stderr, "procs: FAIL: child pid %ld exited with status %d\n", (long)p, WEXITSTATUS(status));
      else
        fprintf(stderr, "procs: FAIL: child pid %ld killed by signal %d\n", (long)p,
                WIFSIGNALED(status) ? WTERMSIG(status) : -1);
      kill_children(); /* the others would wait for it until their timeouts */
    }
    failed = 1;
  }
  alarm(0);
  if (failed)
    return 1;
  printf("procs: %d processes: OK\n", g_n);
  return 0;
}
