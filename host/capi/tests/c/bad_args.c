/* Bad arguments through the C ABI: every call must return its exact ncclResult_t, leave a
 * message for ncclGetLastError, and never crash or hang.
 *
 * - version and strings: ncclGetVersion is 22907; ncclGetErrorString has a distinct
 *   non-empty string for every code 0..7 and a string for unknown codes;
 * - init: NULL outputs, nranks below 1, ranks out of range, a unique id that is not one,
 *   ncclCommInitAll's NULL/empty/bad device list;
 * - a NULL comm for every call that takes one (ncclCommAbort and ncclCommDestroy accept
 *   NULL, as NCCL's);
 * - on a live one-rank communicator: NULL buffers with count > 0 for every collective and
 *   send/recv (count 0 with NULL buffers is fine), counts that are negative numbers cast to
 *   size_t (every collective and element size), data type 99 and -1, operator 99 and -1,
 *   an operator destroyed or made for another type, roots and peers out of range, bad
 *   ncclRedOpCreatePreMulSum/ncclRedOpDestroy arguments, ncclGroupEnd without a group,
 *   bad ncclCommShrink arguments (and a shrink that excludes nobody);
 * - after ncclCommFinalize: collectives are ncclInvalidUsage; after ncclCommDestroy:
 *   every call with the stale handle is ncclInvalidArgument, destroying it again too.
 *
 * usage: bad_args */
#include "common.h"

static int g_checks;

/* A message no tested call can leave: ncclGetVersion(NULL)'s. Set before each expected
 * failure so that the check sees the tested call's own message. */
static char g_sentinel[512];

static void set_sentinel(void) {
  if (ncclGetVersion(NULL) != ncclInvalidArgument)
    fail(-1, "ncclGetVersion(NULL) did not return ncclInvalidArgument");
}

/* `call` returned `got`; it must be `want`, with a fresh last-error message containing
 * `needle` (when not NULL). */
static void expect(const char *file, int line, const char *call, ncclResult_t got, ncclResult_t want,
                   const char *needle) {
  const char *msg = ncclGetLastError(NULL);
  g_checks++;
  if (got != want)
    fail(-1, "%s:%d: %s returned %d (%s), want %d (%s); last error: %s", file, line, call, (int)got,
         ncclGetErrorString(got), (int)want, ncclGetErrorString(want), msg ? msg : "(null)");
  if (want == ncclSuccess || want == ncclInProgress)
    return;
  if (!msg || !*msg)
    fail(-1, "%s:%d: %s failed with %d but ncclGetLastError is empty", file, line, call, (int)got);
  if (!strcmp(msg, g_sentinel))
    fail(-1, "%s:%d: %s failed with %d but left no message of its own (ncclGetLastError: %s)", file, line,
         call, (int)got, msg);
  if (needle && !strstr(msg, needle))
    fail(-1, "%s:%d: %s: the message \"%s\" does not mention \"%s\"", file, line, call, msg, needle);
}

/* `call` must return `want` and (if it fails) leave a message mentioning `needle`. */
#define EXPECT(want, needle, call)                                                           \
  do {                                                                                       \
    ncclResult_t r_;                                                                         \
    set_sentinel();                                                                          \
    set_stage(-1, "%s", #call);                                                              \
    r_ = (call);                                                                             \
    expect(__FILE__, __LINE__, #call, r_, (want), (needle));                                 \
  } while (0)

#define ARG ncclInvalidArgument
#define USAGE ncclInvalidUsage
#define OK ncclSuccess

/* The element types, with the count whose byte size is the largest size_t multiple. */
static const ncclDataType_t ALL_TYPES[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,
                                           ncclInt64,   ncclUint64,  ncclFloat16,  ncclFloat32,
                                           ncclFloat64, ncclBfloat16};
#define NUM_ALL_TYPES (sizeof ALL_TYPES / sizeof ALL_TYPES[0])

static void strings_and_version(void) {
  const char *s[ncclNumResults];
  int v = 0, i, j;
  CHECK(-1, NULL, ncclGetVersion(&v));
  g_checks++;
  if (v != 22907 || v != NCCL_VERSION_CODE)
    fail(-1, "ncclGetVersion gave %d, want 22907 (NCCL_VERSION_CODE %d)", v, NCCL_VERSION_CODE);
  /* ncclGetVersion(NULL) is the sentinel: its code and message are checked in main. */
  for (i = 0; i < (int)ncclNumResults; i++) {
    s[i] = ncclGetErrorString((ncclResult_t)i);
    g_checks++;
    if (!s[i] || !*s[i])
      fail(-1, "ncclGetErrorString(%d) is empty", i);
    for (j = 0; j < i; j++)
      if (!strcmp(s[i], s[j]))
        fail(-1, "ncclGetErrorString(%d) = ncclGetErrorString(%d) = \"%s\"", i, j, s[i]);
  }
  for (i = -1; i <= 99; i += 100 - (int)ncclNumResults) {
    const char *u = ncclGetErrorString((ncclResult_t)i);
    g_checks++;
    if (!u || !*u)
      fail(-1, "ncclGetErrorString(%d) (unknown code) is empty", i);
  }
  if (!ncclGetErrorString((ncclResult_t)ncclNumResults))
    fail(-1, "ncclGetErrorString(ncclNumResults) is NULL");
  if (!ncclGetLastError(NULL))
    fail(-1, "ncclGetLastError(NULL) is NULL");
}

static void init_errors(void) {
  ncclUniqueId id, zero;
  ncclComm_t c = NULL, all[2] = {NULL, NULL};
  int devbig = 1 << 20, devneg = -1; /* no backend has a device 2^20 */
  EXPECT(ARG, "NULL", ncclGetUniqueId(NULL));
  CHECK(-1, NULL, ncclGetUniqueId(&id));
  EXPECT(ARG, "NULL", ncclCommInitRank(NULL, 1, id, 0));
  EXPECT(ARG, "nranks", ncclCommInitRank(&c, 0, id, 0));
  EXPECT(ARG, "nranks", ncclCommInitRank(&c, -3, id, 0));
  EXPECT(ARG, "rank", ncclCommInitRank(&c, 1, id, -1));
  EXPECT(ARG, "rank", ncclCommInitRank(&c, 2, id, 2));
  EXPECT(ARG, "rank", ncclCommInitRank(&c, 1, id, 1));
  memset(&zero, 0, sizeof zero);
  EXPECT(ARG, "ncclUniqueId", ncclCommInitRank(&c, 1, zero, 0));
  memset(&zero, 0x5a, sizeof zero);
  EXPECT(ARG, "ncclUniqueId", ncclCommInitRank(&c, 1, zero, 0));
  EXPECT(ARG, "ncclUniqueId", ncclCommInitRankConfig(&c, 1, zero, 0, NULL));
  EXPECT(ARG, NULL, ncclCommInitRankScalable(&c, 1, 0, 0, &id, NULL));
  EXPECT(ARG, NULL, ncclCommInitRankScalable(&c, 1, 0, 1, NULL, NULL));
  EXPECT(ARG, "NULL", ncclCommInitAll(NULL, 2, NULL));
  EXPECT(ARG, "ndev", ncclCommInitAll(all, 0, NULL));
  EXPECT(ARG, "ndev", ncclCommInitAll(all, -1, NULL));
  EXPECT(ARG, "devlist", ncclCommInitAll(all, 1, &devbig));
  EXPECT(ARG, "devlist", ncclCommInitAll(all, 1, &devneg));
}

/* Every call that takes a communicator, with `c` (NULL, or a destroyed one): each must be
 * ncclInvalidArgument with a message containing `needle`. */
static void stale_or_null(ncclComm_t c, const char *needle) {
  char buf[64];
  ncclComm_t nc = NULL;
  ncclRedOp_t op;
  ncclResult_t async;
  int v;
  void *h = NULL;
  float scalar = 1.0f;
  memset(buf, 0, sizeof buf);
  EXPECT(ARG, needle, ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c, STREAM));
  EXPECT(ARG, needle, ncclBroadcast(buf, buf, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, needle, ncclBcast(buf, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, needle, ncclReduce(buf, buf, 4, ncclFloat, ncclSum, 0, c, STREAM));
  EXPECT(ARG, needle, ncclAllGather(buf, buf, 4, ncclFloat, c, STREAM));
  EXPECT(ARG, needle, ncclReduceScatter(buf, buf, 4, ncclFloat, ncclSum, c, STREAM));
  EXPECT(ARG, needle, ncclAlltoAll(buf, buf, 4, ncclFloat, c, STREAM));
  EXPECT(ARG, needle, ncclGather(buf, buf, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, needle, ncclScatter(buf, buf, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, needle, ncclSend(buf, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, needle, ncclRecv(buf, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, needle, ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c));
  EXPECT(ARG, needle, ncclRedOpDestroy((ncclRedOp_t)ncclNumOps, c));
  EXPECT(ARG, needle, ncclCommCount(c, &v));
  EXPECT(ARG, needle, ncclCommUserRank(c, &v));
  EXPECT(ARG, needle, ncclCommCuDevice(c, &v));
  EXPECT(ARG, needle, ncclCommGetAsyncError(c, &async));
  EXPECT(ARG, needle, ncclCommFinalize(c));
  EXPECT(ARG, needle, ncclCommSplit(c, 0, 0, &nc, NULL));
  EXPECT(ARG, needle, ncclCommRegister(c, buf, sizeof buf, &h));
  EXPECT(ARG, needle, ncclCommDeregister(c, buf));
  EXPECT(ARG, needle, ncclCommRevoke(c, 0));
  /* Shrink and the refused calls check the communicator first. */
  EXPECT(ARG, needle, ncclCommShrink(c, NULL, 0, &nc, NULL, 0));
  EXPECT(ARG, needle, ncclCommSuspend(c, 0));
  EXPECT(ARG, needle, ncclCommResume(c));
}

/* Bad arguments on the live one-rank communicator `c` (rank 0 of 1). */
static void live_errors(ncclComm_t c) {
  const size_t neg = (size_t)-1, neg2 = (size_t)(ptrdiff_t)-1000;
  size_t ti;
  unsigned char buf[256], out[256];
  ncclRedOp_t op = (ncclRedOp_t)0, op2;
  ncclComm_t nc;
  float scalar = 2.0f;
  double dscalar = 2.0;
  ncclResult_t async = ncclInternalError;
  int v;

  /* The live communicator answers. */
  CHECK(-1, c, ncclCommCount(c, &v));
  if (v != 1)
    fail(-1, "ncclCommCount = %d, want 1", v);
  CHECK(-1, c, ncclCommGetAsyncError(c, &async));
  if (async != ncclSuccess)
    fail(-1, "ncclCommGetAsyncError reports %d on a healthy communicator", (int)async);
  EXPECT(ARG, "NULL", ncclCommCount(c, NULL));
  EXPECT(ARG, "NULL", ncclCommUserRank(c, NULL));
  EXPECT(ARG, "NULL", ncclCommCuDevice(c, NULL));
  EXPECT(ARG, "NULL", ncclCommGetAsyncError(c, NULL));

  /* NULL buffers with count > 0. */
  memset(buf, 0, sizeof buf);
  EXPECT(ARG, "null", ncclAllReduce(NULL, out, 4, ncclFloat, ncclSum, c, STREAM));
  EXPECT(ARG, "null", ncclAllReduce(buf, NULL, 4, ncclFloat, ncclSum, c, STREAM));
  EXPECT(ARG, "null", ncclBroadcast(NULL, out, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclBroadcast(buf, NULL, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclBcast(NULL, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclReduce(NULL, out, 4, ncclFloat, ncclSum, 0, c, STREAM));
  EXPECT(ARG, "null", ncclReduce(buf, NULL, 4, ncclFloat, ncclSum, 0, c, STREAM));
  EXPECT(ARG, "null", ncclAllGather(NULL, out, 4, ncclFloat, c, STREAM));
  EXPECT(ARG, "null", ncclAllGather(buf, NULL, 4, ncclFloat, c, STREAM));
  EXPECT(ARG, "null", ncclReduceScatter(NULL, out, 4, ncclFloat, ncclSum, c, STREAM));
  EXPECT(ARG, "null", ncclReduceScatter(buf, NULL, 4, ncclFloat, ncclSum, c, STREAM));
  EXPECT(ARG, "null", ncclAlltoAll(NULL, out, 4, ncclFloat, c, STREAM));
  EXPECT(ARG, "null", ncclAlltoAll(buf, NULL, 4, ncclFloat, c, STREAM));
  EXPECT(ARG, "null", ncclGather(NULL, out, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclGather(buf, NULL, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclScatter(NULL, out, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclScatter(buf, NULL, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclSend(NULL, 4, ncclFloat, 0, c, STREAM));
  EXPECT(ARG, "null", ncclRecv(NULL, 4, ncclFloat, 0, c, STREAM));
  /* ... but count 0 needs no buffer. */
  EXPECT(OK, NULL, ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, c, STREAM));
  EXPECT(OK, NULL, ncclBroadcast(NULL, NULL, 0, ncclFloat, 0, c, STREAM));
  EXPECT(OK, NULL, ncclAllGather(NULL, NULL, 0, ncclFloat, c, STREAM));
  EXPECT(OK, NULL, ncclAlltoAll(NULL, NULL, 0, ncclFloat, c, STREAM));

  /* Counts that are negative numbers cast to size_t, for every element size. */
  for (ti = 0; ti < NUM_ALL_TYPES; ti++) {
    ncclDataType_t t = ALL_TYPES[ti];
    size_t k;
    for (k = 0; k < 2; k++) {
      size_t n = k ? neg2 : neg;
      set_stage(-1, "negative count %zu of %s", n, type_name(t));
      EXPECT(ARG, "count", ncclAllReduce(buf, out, n, t, ncclSum, c, STREAM));
      EXPECT(ARG, "count", ncclBroadcast(buf, out, n, t, 0, c, STREAM));
      EXPECT(ARG, "count", ncclBcast(buf, n, t, 0, c, STREAM));
      EXPECT(ARG, "count", ncclReduce(buf, out, n, t, ncclSum, 0, c, STREAM));
      EXPECT(ARG, "count", ncclAllGather(buf, out, n, t, c, STREAM));
      EXPECT(ARG, "count", ncclReduceScatter(buf, out, n, t, ncclSum, c, STREAM));
      EXPECT(ARG, "count", ncclAlltoAll(buf, out, n, t, c, STREAM));
      EXPECT(ARG, "count", ncclGather(buf, out, n, t, 0, c, STREAM));
      EXPECT(ARG, "count", ncclScatter(buf, out, n, t, 0, c, STREAM));
      EXPECT(ARG, "count", ncclSend(buf, n, t, 0, c, STREAM));
      EXPECT(ARG, "count", ncclRecv(out, n, t, 0, c, STREAM));
    }
  }

  /* Bad data types and operators. */
  EXPECT(ARG, "data type", ncclAllReduce(buf, out, 4, (ncclDataType_t)99, ncclSum, c, STREAM));
  EXPECT(ARG, "data type", ncclAllReduce(buf, out, 4, (ncclDataType_t)-1, ncclSum, c, STREAM));
  EXPECT(ARG, "data type", ncclAllReduce(buf, out, 4, (ncclDataType_t)ncclNumTypes, ncclSum, c, STREAM));
  EXPECT(ARG, "data type", ncclBroadcast(buf, out, 4, (ncclDataType_t)99, 0, c, STREAM));
  EXPECT(ARG, "data type", ncclBcast(buf, 4, (ncclDataType_t)99, 0, c, STREAM));
  EXPECT(ARG, "data type", ncclReduce(buf, out, 4, (ncclDataType_t)99, ncclSum, 0, c, STREAM));
  EXPECT(ARG, "data type", ncclAllGather(buf, out, 4, (ncclDataType_t)99, c, STREAM));
  EXPECT(ARG, "data type", ncclReduceScatter(buf, out, 4, (ncclDataType_t)99, ncclSum, c, STREAM));
  EXPECT(ARG, "data type", ncclAlltoAll(buf, out, 4, (ncclDataType_t)99, c, STREAM));
  EXPECT(ARG, "data type", ncclGather(buf, out, 4, (ncclDataType_t)99, 0, c, STREAM));
  EXPECT(ARG, "data type", ncclScatter(buf, out, 4, (ncclDataType_t)99, 0, c, STREAM));
  EXPECT(ARG, "data type", ncclSend(buf, 4, (ncclDataType_t)99, 0, c, STREAM));
  EXPECT(ARG, "data type", ncclRecv(out, 4, (ncclDataType_t)99, 0, c, STREAM));
  EXPECT(ARG, "operator", ncclAllReduce(buf, out, 4, ncclFloat, (ncclRedOp_t)99, c, STREAM));
  EXPECT(ARG, "operator", ncclAllReduce(buf, out, 4, ncclFloat, (ncclRedOp_t)-1, c, STREAM));
  EXPECT(ARG, "operator", ncclAllReduce(buf, out, 4, ncclFloat, (ncclRedOp_t)ncclNumOps, c, STREAM));
  EXPECT(ARG, "operator", ncclReduce(buf, out, 4, ncclFloat, (ncclRedOp_t)99, 0, c, STREAM));
  EXPECT(ARG, "operator", ncclReduceScatter(buf, out, 4, ncclFloat, (ncclRedOp_t)99, c, STREAM));

  /* ncclRedOpCreatePreMulSum / ncclRedOpDestroy. */
  EXPECT(ARG, "NULL", ncclRedOpCreatePreMulSum(NULL, &scalar, ncclFloat, ncclScalarHostImmediate, c));
  EXPECT(ARG, "NULL", ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, c));
  EXPECT(ARG, "data type", ncclRedOpCreatePreMulSum(&op, &scalar, (ncclDataType_t)99, ncclScalarHostImmediate, c));
  EXPECT(ARG, "residence", ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, (ncclScalarResidence_t)7, c));
  CHECK(-1, c, ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, c));
  CHECK(-1, c, ncclRedOpCreatePreMulSum(&op2, &dscalar, ncclDouble, ncclScalarHostImmediate, c));
  if (op < ncclNumOps || op2 < ncclNumOps || op == op2)
    fail(-1, "ncclRedOpCreatePreMulSum gave operators %d and %d", (int)op, (int)op2);
  memset(buf, 0, sizeof buf);
  EXPECT(OK, NULL, ncclAllReduce(buf, out, 4, ncclFloat, op, c, STREAM));
  EXPECT(ARG, "made for", ncclAllReduce(buf, out, 4, ncclInt32, op, c, STREAM));
  EXPECT(ARG, "made for", ncclAllReduce(buf, out, 4, ncclFloat, op2, c, STREAM));
  EXPECT(ARG, "built in", ncclRedOpDestroy(ncclSum, c));
  EXPECT(ARG, "built in", ncclRedOpDestroy(ncclAvg, c));
  CHECK(-1, c, ncclRedOpDestroy(op, c));
  EXPECT(ARG, "live operator", ncclRedOpDestroy(op, c));
  EXPECT(ARG, "operator", ncclAllReduce(buf, out, 4, ncclFloat, op, c, STREAM));
  CHECK(-1, c, ncclRedOpDestroy(op2, c));
  EXPECT(ARG, "live operator", ncclRedOpDestroy((ncclRedOp_t)12345, c));

  /* Roots and peers out of range (count 0 too: the root is checked first). */
  EXPECT(ARG, "root", ncclBroadcast(buf, out, 4, ncclFloat, 1, c, STREAM));
  EXPECT(ARG, "root", ncclBroadcast(buf, out, 4, ncclFloat, -1, c, STREAM));
  EXPECT(ARG, "root", ncclBroadcast(buf, out, 0, ncclFloat, 7, c, STREAM));
  EXPECT(ARG, "root", ncclBcast(buf, 4, ncclFloat, 1, c, STREAM));
  EXPECT(ARG, "root", ncclReduce(buf, out, 4, ncclFloat, ncclSum, 1, c, STREAM));
  EXPECT(ARG, "root", ncclReduce(buf, out, 4, ncclFloat, ncclSum, -5, c, STREAM));
  EXPECT(ARG, "root", ncclGather(buf, out, 4, ncclFloat, 1, c, STREAM));
  EXPECT(ARG, "root", ncclGather(buf, out, 4, ncclFloat, -1, c, STREAM));
  EXPECT(ARG, "root", ncclScatter(buf, out, 4, ncclFloat, 1, c, STREAM));
  EXPECT(ARG, "root", ncclScatter(buf, out, 4, ncclFloat, -1, c, STREAM));
  EXPECT(ARG, "peer", ncclSend(buf, 4, ncclFloat, 1, c, STREAM));
  EXPECT(ARG, "peer", ncclSend(buf, 4, ncclFloat, -1, c, STREAM));
  EXPECT(ARG, "peer", ncclRecv(out, 4, ncclFloat, 1, c, STREAM));
  EXPECT(ARG, "peer", ncclRecv(out, 4, ncclFloat, -2, c, STREAM));
  /* A bad peer inside a group: the call fails, the group still ends. */
  CHECK(-1, c, ncclGroupStart());
  EXPECT(ARG, "peer", ncclSend(buf, 4, ncclFloat, 3, c, STREAM));
  EXPECT(OK, NULL, ncclGroupEnd());
  EXPECT(USAGE, "ncclGroupEnd", ncclGroupEnd());

  /* Split: NULL output, a negative color other than NCCL_SPLIT_NOCOLOR. */
  EXPECT(ARG, "NULL", ncclCommSplit(c, 0, 0, NULL, NULL));
  EXPECT(ARG, "color", ncclCommSplit(c, -7, 0, &nc, NULL));

  /* Shrink: bad arguments, then a shrink that excludes nobody (a one-rank copy). */
  {
    int self = 0, out_of_range = 5, twice[2] = {3, 3};
    ncclComm_t sc = NULL;
    int32_t x = 5, y = 0;
    EXPECT(ARG, "newcomm", ncclCommShrink(c, NULL, 0, NULL, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(ARG, "negative", ncclCommShrink(c, NULL, -1, &nc, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(ARG, "excludeRanksList", ncclCommShrink(c, NULL, 1, &nc, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(ARG, "shrinkFlags", ncclCommShrink(c, NULL, 0, &nc, NULL, 7));
    EXPECT(ARG, "must not call", ncclCommShrink(c, &self, 1, &nc, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(ARG, "not below", ncclCommShrink(c, &out_of_range, 1, &nc, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(ARG, "not below", ncclCommShrink(c, twice, 2, &nc, NULL, NCCL_SHRINK_DEFAULT));
    EXPECT(OK, NULL, ncclCommShrink(c, NULL, 0, &sc, NULL, NCCL_SHRINK_DEFAULT));
    if (!sc || sc == c)
      fail(-1, "ncclCommShrink excluding nobody gave comm %p (parent %p)", (void *)sc, (void *)c);
    CHECK(-1, sc, ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, sc, STREAM));
    if (y != 5)
      fail(-1, "all-reduce on the shrunk communicator gave %d", (int)y);
    CHECK(-1, sc, ncclCommDestroy(sc));
    g_checks++;
  }

  /* Unsupported calls: ncclInvalidUsage with a reason. */
  EXPECT(USAGE, "not supported", ncclCommGetUniqueId(c, NULL));
  EXPECT(USAGE, "not supported", ncclCommSuspend(c, 0));
  EXPECT(USAGE, "not supported", ncclCommMemStats(c, ncclStatGpuMemTotal, NULL));

  /* The communicator still works after all that. */
  {
    int32_t x[3] = {1, -2, 3}, y[3] = {0, 0, 0};
    CHECK(-1, c, ncclAllReduce(x, y, 3, ncclInt32, ncclSum, c, STREAM));
    if (y[0] != 1 || y[1] != -2 || y[2] != 3)
      fail(-1, "one-rank all-reduce after the bad calls gave %d %d %d", y[0], y[1], y[2]);
    g_checks++;
  }
}

static void after_finalize(ncclComm_t c) {
  float x = 1, y = 0;
  CHECK(-1, c, ncclCommFinalize(c));
  EXPECT(USAGE, "finalized", ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c, STREAM));
  EXPECT(USAGE, "finalized", ncclBroadcast(&x, &y, 1, ncclFloat, 0, c, STREAM));
  EXPECT(USAGE, "finalized", ncclSend(&x, 1, ncclFloat, 0, c, STREAM));
  EXPECT(USAGE, "finalized", ncclCommFinalize(c));
}

int main(void) {
  ncclUniqueId id;
  ncclComm_t c = NULL, c2 = NULL;
  const char *m;

  watchdog("bad_args", 60);
  /* The sentinel: ncclGetVersion(NULL)'s message. */
  if (ncclGetVersion(NULL) != ncclInvalidArgument)
    fail(-1, "ncclGetVersion(NULL) did not return ncclInvalidArgument");
  m = ncclGetLastError(NULL);
  if (!m || !*m)
    fail(-1, "ncclGetVersion(NULL) left no last error");
  snprintf(g_sentinel, sizeof g_sentinel, "%s", m);

  strings_and_version();
  init_errors();
  stale_or_null(NULL, "NULL");
  EXPECT(OK, NULL, ncclCommAbort(NULL));
  EXPECT(OK, NULL, ncclCommDestroy(NULL));

  set_stage(-1, "ncclCommInitRank (1 rank)");
  CHECK(-1, NULL, ncclGetUniqueId(&id));
  CHECK(-1, NULL, ncclCommInitRank(&c, 1, id, 0));
  live_errors(c);
  after_finalize(c);
  CHECK(-1, c, ncclCommDestroy(c));
  /* Destroyed: the handle is stale. */
  stale_or_null(c, "not a communicator");
  EXPECT(ARG, "not a communicator", ncclCommDestroy(c));
  EXPECT(ARG, "not a communicator", ncclCommAbort(c));
  /* A handle that never was one. */
  stale_or_null((ncclComm_t)(uintptr_t)0x1234560, "not a communicator");

  /* Abort, then the stale handle. */
  CHECK(-1, NULL, ncclGetUniqueId(&id));
  CHECK(-1, NULL, ncclCommInitRank(&c2, 1, id, 0));
  CHECK(-1, c2, ncclCommAbort(c2));
  EXPECT(ARG, "not a communicator", ncclCommDestroy(c2));
  EXPECT(ARG, "not a communicator", ncclAllReduce(&id, &id, 1, ncclInt8, ncclSum, c2, STREAM));

  printf("bad_args: %d checks OK\n", g_checks);
  return 0;
}
