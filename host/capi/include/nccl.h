/*
 * nccl.h for oxccl's libnccl.so.2
 *
 * oxccl is a collective-communication library written in Rust. Its C library is a drop-in
 * replacement for NCCL's libnccl.so.2, and this header, written for oxccl, declares that
 * library's interface with the ABI of NCCL 2.29.7: the same types, enum values, struct
 * layouts, struct and enum tag names (C++ code mangles its own functions with them),
 * macros and functions. A program built against NVIDIA's nccl.h 2.29.7 runs on oxccl, and
 * one built against this file runs on NCCL 2.29.7.
 *
 * Every nccl* function has a pnccl* twin with the same signature and behaviour (the
 * profiling entry points that NCCL exports too). Comments with "oxccl:" say where
 * oxccl behaves differently from NCCL; anything not noted works as NCCL documents it.
 *
 * Past NVIDIA's nccl.h, this file also declares the host side of the Device API (teams,
 * requirements, properties, window pointer getters) that NCCL keeps in its nccl_device
 * headers and exports from the same library: see the end of the file.
 *
 * No CUDA headers are needed: when <cuda_runtime.h> is on the include path it is included
 * (as NCCL does, with the fp16/bf16/fp8 headers); otherwise cudaStream_t is declared here
 * with CUDA's own definition. Define OXCCL_NCCL_NO_CUDA_HEADERS to never include them.
 *
 * SPDX-License-Identifier: Apache-2.0 OR MIT
 */

#ifndef NCCL_H_
#define NCCL_H_

/* Tells code that it is built against oxccl's header. */
#define OXCCL_NCCL_H 1

/* ---- CUDA types used in the declarations ------------------------------------------- */

#if !defined(OXCCL_NCCL_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define OXCCL_NCCL_HAVE_CUDA_RUNTIME 1
#endif
#endif

#if defined(OXCCL_NCCL_HAVE_CUDA_RUNTIME)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#elif !defined(__DRIVER_TYPES_H__)
/* The definition of CUDA's driver_types.h: a stream is a pointer to struct CUstream_st. */
typedef struct CUstream_st *cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

/* ---- Version ------------------------------------------------------------------------ */

/* oxccl claims the NCCL version whose ABI it implements. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 29
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22907
/* Version code of X.Y.Z: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z after it. */
#define NCCL_VERSION(X, Y, Z)                                                   \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define OXCCL_NCCL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define OXCCL_NCCL_DEPRECATED(msg)
#endif

/* ---- Handles and basic types --------------------------------------------------------- */

/* A communicator: one rank's handle, opaque to callers. */
typedef struct ncclComm *ncclComm_t;
/* A registered memory window, opaque on the host. */
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The rendezvous token that every rank of a new communicator is given (128 bytes, passed by
 * value). oxccl: it carries the TCP rendezvous address and a secret that peers must show. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* What every call returns. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6, /* a peer failed or went away */
  ncclInProgress = 7,  /* a nonblocking call is still running: poll ncclCommGetAsyncError */
  ncclNumResults = 8
} ncclResult_t;

/* "Not set" markers of configuration fields: the library picks its default. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
/* Color of a rank that takes no part in any communicator made by ncclCommSplit. */
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* First 32-bit word after the size of every versioned struct (config, properties, ...). */
#define NCCL_API_MAGIC 0xcafebeef

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01 /* every rank uses the same offsets in collectives */
#define NCCL_WIN_STRICT_ORDERING 0x02
/* Alignment of a window's buffer. */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00 /* no operation of the parent is in flight */
#define NCCL_SHRINK_ABORT 0x01   /* abort the parent's operations first */

/* ncclCommRevoke flags (only this one exists). */
#define NCCL_REVOKE_DEFAULT 0x00

/* ---- Communicator configuration ----------------------------------------------------- */

/* Settings of a new communicator. Start from NCCL_CONFIG_INITIALIZER and set the fields
 * wanted; the library reads only the fields the caller's version had. x86_64 and aarch64
 * layout: size@0 magic@8 version@12 blocking@16 cgaClusterSize@20 minCTAs@24 maxCTAs@28
 * netName@32 splitShare@40 trafficClass@44 commName@48 collnetEnable@56 CTAPolicy@60
 * shrinkShare@64 nvlsCTAs@68 nChannelsPerNetPeer@72 nvlinkCentricSched@76
 * graphUsageMode@80 numRmaCtx@84, 88 bytes. */
typedef struct ncclConfig_v22800 {
  size_t size;          /* sizeof(ncclConfig_t) of the caller */
  unsigned int magic;   /* NCCL_API_MAGIC */
  unsigned int version; /* NCCL_VERSION_CODE of the caller's header */
  int blocking;         /* 0: init and split return ncclInProgress and finish in the background */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy; /* NCCL_CTA_POLICY_* */
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;
  int numRmaCtx;
} ncclConfig_t;

/* Value to start every ncclConfig_t from: header filled in, every setting "not set". */
#define NCCL_CONFIG_INITIALIZER                                                  \
  {                                                                              \
    sizeof(ncclConfig_t),                              /* size */                \
    NCCL_API_MAGIC,                                    /* magic */               \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),  /* version */             \
    NCCL_CONFIG_UNDEF_INT,                             /* blocking */            \
    NCCL_CONFIG_UNDEF_INT,                             /* cgaClusterSize */      \
    NCCL_CONFIG_UNDEF_INT,                             /* minCTAs */             \
    NCCL_CONFIG_UNDEF_INT,                             /* maxCTAs */             \
    NCCL_CONFIG_UNDEF_PTR,                             /* netName */             \
    NCCL_CONFIG_UNDEF_INT,                             /* splitShare */          \
    NCCL_CONFIG_UNDEF_INT,                             /* trafficClass */        \
    NCCL_CONFIG_UNDEF_PTR,                             /* commName */            \
    NCCL_CONFIG_UNDEF_INT,                             /* collnetEnable */       \
    NCCL_CONFIG_UNDEF_INT,                             /* CTAPolicy */           \
    NCCL_CONFIG_UNDEF_INT,                             /* shrinkShare */         \
    NCCL_CONFIG_UNDEF_INT,                             /* nvlsCTAs */            \
    NCCL_CONFIG_UNDEF_INT,                             /* nChannelsPerNetPeer */ \
    NCCL_CONFIG_UNDEF_INT,                             /* nvlinkCentricSched */  \
    NCCL_CONFIG_UNDEF_INT,                             /* graphUsageMode */      \
    NCCL_CONFIG_UNDEF_INT,                             /* numRmaCtx */           \
  }

/* What ncclGroupSimulateEnd reports: size@0 magic@8 version@12 estimatedTime@16, 24
 * bytes. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic; /* 0x74685283 */
  unsigned int version;
  float estimatedTime; /* microseconds */
} ncclSimInfo_t;

/* Value to start every ncclSimInfo_t from. */
#define NCCL_SIM_INFO_INITIALIZER                                               \
  {                                                                             \
    sizeof(ncclSimInfo_t),                             /* size */               \
    0x74685283,                                        /* magic */              \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),  /* version */            \
    NCCL_UNDEF_FLOAT                                   /* estimatedTime */      \
  }

/* ---- Memory ---------------------------------------------------------------------------- */

/* Allocates GPU memory suited to registration and windows (the size may be rounded up).
 * oxccl: CUDA VMM memory, which ranks in other processes of the node can map. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);

/* Frees memory from ncclMemAlloc. */
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

/* ---- Version and communicator set-up -------------------------------------------------- */

/* Stores the library's NCCL_VERSION_CODE. oxccl: 22907, the ABI it implements. */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

/* Makes a fresh id; hand it to every rank out of band before they call ncclCommInitRank*. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);

/* Makes this process's rank `rank` of an nranks-rank communicator (config may be NULL).
 * oxccl: several ranks may share one GPU, in one process or in several. */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                     int rank, ncclConfig_t *config);

/* ncclCommInitRankConfig with the default configuration; the current CUDA device is the
 * rank's GPU. oxccl: several ranks may share one GPU. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);

/* Makes all ndev ranks of a communicator in this process at once, rank i on device
 * devlist[i] (devices 0..ndev-1 when devlist is NULL). oxccl: devlist may name a device
 * more than once. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);

/* Waits for this rank's issued work and meets the other ranks; ncclCommDestroy then frees
 * locally. With blocking = 0 it returns ncclInProgress until done. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/* Frees the communicator (and reports an error it still holds). */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stops what is running on the communicator (device waits see the abort flag) and frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Stops in-flight operations and refuses new ones, leaving the communicator to destroy,
 * split or shrink; may return ncclInProgress. revokeFlags: NCCL_REVOKE_DEFAULT. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* Collective over comm: ranks with equal color form a new communicator, ordered by key;
 * NCCL_SPLIT_NOCOLOR gets NULL. A NULL config copies the parent's. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);

/* Collective over the ranks not listed: a new communicator without the excluded ranks,
 * the others renumbered in order. shrinkFlags: NCCL_SHRINK_*. Only the surviving ranks call
 * it (excluded ones may be dead). */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                             ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);

/* Makes the single-use id that the ranks joining an ncclCommGrow need. */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);

/* Makes a larger communicator of nRanks ranks. Ranks of comm pass rank -1 (uniqueId only
 * on the one that made it, NULL elsewhere); joining ranks pass comm NULL, their new rank
 * and the id. */
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                           ncclComm_t *newcomm, ncclConfig_t *config);

/* ncclCommInitRankConfig with nId ids (the same list on every rank) to spread the
 * rendezvous. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config);

/* ---- Errors and queries --------------------------------------------------------------- */

/* A fixed text for each result code. */
const char *ncclGetErrorString(ncclResult_t result);
const char *pncclGetErrorString(ncclResult_t result);

/* The message of the last error seen (comm may be NULL). */
const char *ncclGetLastError(ncclComm_t comm);
const char *pncclGetLastError(ncclComm_t comm);

/* Rereads the logging environment (NCCL_DEBUG, NCCL_DEBUG_SUBSYS). Deprecated in NCCL. */
OXCCL_NCCL_DEPRECATED("ncclResetDebugInit is outside NCCL's supported API")
void ncclResetDebugInit(void);
OXCCL_NCCL_DEPRECATED("pncclResetDebugInit is outside NCCL's supported API")
void pncclResetDebugInit(void);

/* The communicator's asynchronous state: ncclSuccess, ncclInProgress or the error met. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

/* Number of ranks. */
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);

/* CUDA device of this rank. oxccl: other ranks may report the same device. */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);

/* This rank's number. */
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);

/* ---- Buffer registration, suspend, memory statistics ------------------------------------ */

/* Registers a buffer for zero-copy use by later operations (local). */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);

/* Undoes ncclCommRegister. */
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);

/* ncclCommSuspend flags. */
#define NCCL_SUSPEND_MEM 0x01 /* release the GPU memory that can be given back */

/* Puts the communicator to sleep (unusable until ncclCommResume). */
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);

/* Wakes a suspended communicator. */
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);

/* What ncclCommMemStats reports. */
typedef enum {
  ncclStatGpuMemSuspend = 0,   /* bytes of GPU memory a suspend can release */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended, else 0 */
  ncclStatGpuMemPersist = 2,   /* bytes of GPU memory kept while suspended */
  ncclStatGpuMemTotal = 3      /* all GPU memory the communicator holds, in bytes */
} ncclCommMemStat_t;

ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);

/* ---- Memory windows ------------------------------------------------------------------- */

/* Collective: registers buff as this rank's part of a window that peers can address.
 * winFlags: NCCL_WIN_*. The window is usable after the call (or after ncclGroupEnd).
 * oxccl: the LSA team is the whole communicator (ranks on one node), ranks may register
 * different sizes, and no multicast object is made. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                     ncclWindow_t *win, int winFlags);

/* Local: releases this rank's part of a window. */
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* The buffer this rank registered for win. */
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);

/* ---- Reduction operators and data types ------------------------------------------------ */

/* Sizes ncclMaxRedOp so that ncclRedOp_t keeps the size of a plain enum. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;

/* Built-in operators 0..4; ncclRedOpCreatePreMulSum hands out values from ncclNumOps up. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  /* The largest signed value that fits the size of a plain enum (0x7fffffff). */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  ncclScalarDevice = 0,       /* device memory, read by the kernels of each operation */
  ncclScalarHostImmediate = 1 /* host memory, read before ncclRedOpCreatePreMulSum returns */
} ncclScalarResidence_t;

/* Makes an operator that multiplies each input by *scalar (of type datatype) before
 * summing; valid on comm with that data type only. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);

/* Frees an operator made by ncclRedOpCreatePreMulSum on comm. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives ---------------------------------------------------------------------
 * Each rank calls the same operation in the same order; the calls enqueue work on stream
 * and return. Counts are in elements of datatype. Several ranks driven from one thread
 * need ncclGroupStart/ncclGroupEnd around their calls. */

/* Reduces every rank's sendbuff with op into root's recvbuff. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* In-place ncclBroadcast (older form). */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);

/* Copies root's sendbuff into every rank's recvbuff. */
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);

/* Reduces every rank's sendbuff with op into every rank's recvbuff. */
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);

/* Reduces nranks*recvcount elements; rank i gets block i of the result. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);

/* Rank i's sendcount elements land at recvbuff + i*sendcount on every rank. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block j of rank i's sendbuff lands as block i of rank j's recvbuff (count per block). */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Rank i's count elements land at recvbuff + i*count on root. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* Block i of root's sendbuff (count elements) lands in rank i's recvbuff. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);

/* ---- Point to point --------------------------------------------------------------------
 * The k-th send from rank a to rank b matches the k-th receive of b from a, with the same
 * count and data type. Sends and receives that must progress together go in one group. */

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* ---- One-sided operations on windows ------------------------------------------------------
 * In NCCL 2.29 sigIdx, ctx and flags must be 0, and localbuff lies in a window registered
 * with NCCL_WIN_COLL_SYMMETRIC. */

/* Writes count elements of localbuff to peer's window peerWin at peerWinOffset bytes, then
 * adds one to the signal that peer keeps for this rank. */
ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                           int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                           int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                            int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);

/* Adds one to peer's signal for this rank, without data. */
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);

/* One entry of ncclWaitSignal: wait for opCnt more signals from peer (16 bytes). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

/* Makes stream wait until every descriptor's signals have arrived. */
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                             cudaStream_t stream);

/* ---- Groups ----------------------------------------------------------------------------
 * Calls between ncclGroupStart and the matching ncclGroupEnd (groups nest, per thread) are
 * launched together at the outermost ncclGroupEnd: one thread can drive several ranks, and
 * sends and receives progress together. */

ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);

ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* Ends the group like ncclGroupEnd but launches nothing; reports an estimate in simInfo. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

/* ---- Device API, host side ------------------------------------------------------------
 * NCCL declares these in nccl_device/core.h, lsa_barrier.h, gin_barrier.h and ll_a2a.h
 * (two requirement helpers only in its sources) and exports them from libnccl.so.2 like the
 * rest; the types and layouts here are NCCL 2.29.7's. The section is left out when NVIDIA's
 * nccl_device headers were included first (they declare it themselves); define
 * OXCCL_NCCL_NO_DEVICE_API before including this file to leave it out otherwise.
 * oxccl: its own device-side API is ptx/oxccl_device.h with ptx/oxccl_device.bc. */
#if !defined(_NCCL_DEVICE_CORE_H_) && !defined(OXCCL_NCCL_NO_DEVICE_API)

/* The device communicator that kernels take by value. Its layout (224 bytes in 2.29.7) is
 * in the device headers. oxccl: ncclDevCommCreate writes oxccl's device communicator
 * (OxcclDevComm of ptx/oxccl_device.h, 112 bytes) into it. */
struct ncclDevComm;
typedef struct ncclDevComm ncclDevComm_t;

/* A set of ranks: rank r of the team is world rank (r - rank) * stride + own world rank. */
struct ncclTeam {
  int nRanks, rank, stride;
};
typedef struct ncclTeam ncclTeam_t;

/* Handles that ncclDevCommCreate fills in, for the kernels. */
struct ncclMultimemHandle {
  void *mcBasePtr;
};
typedef struct ncclMultimemHandle ncclMultimemHandle_t;

typedef uint32_t ncclDevResourceHandle;
typedef ncclDevResourceHandle ncclDevResourceHandle_t;
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;

struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle;
  int nBarriers;
};
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;

struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t unused;
};
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;

struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
};
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

/* Handles of NCCL's internal GIN scratch buffers (layout not public). */
struct ncclGinOutboxHandle;
struct ncclGinInboxA2AHandle;

typedef enum {
  NCCL_GIN_CONNECTION_NONE = 0,
  NCCL_GIN_CONNECTION_FULL = 1,
  NCCL_GIN_CONNECTION_RAIL = 2
} ncclGinConnectionType_t;

typedef enum {
  NCCL_GIN_TYPE_NONE = 0,
  NCCL_GIN_TYPE_PROXY = 2,
  NCCL_GIN_TYPE_GDAKI = 3
} ncclGinType_t;

/* A chained request for a buffer and GIN signals/counters in the device communicator's
 * resource window (56 bytes). */
struct ncclDevResourceRequirements;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
struct ncclDevResourceRequirements {
  ncclDevResourceRequirements_t *next;
  size_t bufferSize, bufferAlign;
  ncclDevResourceHandle_t *outBufferHandle; /* set by ncclDevCommCreate when not NULL */
  int ginSignalCount;
  int ginCounterCount;
  ncclGinSignal_t *outGinSignalStart;
  ncclGinCounter_t *outGinCounterStart;
};

/* A chained request for multimem on a team (32 bytes). */
struct ncclTeamRequirements;
typedef struct ncclTeamRequirements ncclTeamRequirements_t;
struct ncclTeamRequirements {
  ncclTeamRequirements_t *next;
  ncclTeam_t team;
  bool multimem;
  ncclMultimemHandle_t *outMultimemHandle; /* set by ncclDevCommCreate when not NULL */
};

/* What ncclDevCommCreate is asked for (88 bytes). Start from
 * NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER. */
struct ncclDevCommRequirements {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclDevResourceRequirements_t *resourceRequirementsList;
  ncclTeamRequirements_t *teamRequirementsList;
  bool lsaMultimem;
  int barrierCount;
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable; /* deprecated */
  int ginContextCount; /* a hint */
  int ginSignalCount;
  int ginCounterCount;
  ncclGinConnectionType_t ginConnectionType;
  bool ginExclusiveContexts;
  int ginQueueDepth;
};
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;

#define NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER                                        \
  {                                                                                   \
    sizeof(ncclDevCommRequirements_t),                 /* size */                     \
    NCCL_API_MAGIC,                                    /* magic */                    \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),  /* version */                  \
    NULL,                                              /* resourceRequirementsList */ \
    NULL,                                              /* teamRequirementsList */     \
    false,                                             /* lsaMultimem */              \
    0,                                                 /* barrierCount */             \
    0,                                                 /* lsaBarrierCount */          \
    0,                                                 /* railGinBarrierCount */      \
    0,                                                 /* lsaLLA2ABlockCount */       \
    0,                                                 /* lsaLLA2ASlotCount */        \
    false,                                             /* ginForceEnable */           \
    4,                                                 /* ginContextCount */          \
    0,                                                 /* ginSignalCount */           \
    0,                                                 /* ginCounterCount */          \
    NCCL_GIN_CONNECTION_NONE,                          /* ginConnectionType */        \
    false,                                             /* ginExclusiveContexts */     \
    0,                                                 /* ginQueueDepth */            \
  }

/* What ncclCommQueryProperties reports (56 bytes). Start from
 * NCCL_COMM_PROPERTIES_INITIALIZER. */
struct ncclCommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  ncclGinType_t ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  ncclGinType_t railedGinType;
};
typedef struct ncclCommProperties ncclCommProperties_t;

/* Header filled in, the rest zero (as NCCL's initializer leaves it). */
#define NCCL_COMM_PROPERTIES_INITIALIZER                                        \
  {                                                                             \
    sizeof(ncclCommProperties_t),                      /* size */               \
    NCCL_API_MAGIC,                                    /* magic */              \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),  /* version */            \
    0,                                                 /* rank */               \
    0,                                                 /* nRanks */             \
    0,                                                 /* cudaDev */            \
    0,                                                 /* nvmlDev */            \
    false,                                             /* deviceApiSupport */   \
    false,                                             /* multimemSupport */    \
    NCCL_GIN_TYPE_NONE,                                /* ginType */            \
    0,                                                 /* nLsaTeams */          \
    false,                                             /* hostRmaSupport */     \
    NCCL_GIN_TYPE_NONE                                 /* railedGinType */      \
  }

/* Fills props (its size, magic and version set by the caller). oxccl: multimemSupport is
 * false and ginType NCCL_GIN_TYPE_NONE (no multicast objects, no GIN). */
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props);
ncclResult_t pncclCommQueryProperties(ncclComm_t comm, ncclCommProperties_t *props);

/* Collective: makes the device communicator that users' kernels take, with the resources
 * asked for. */
ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
                               ncclDevComm_t *outDevComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
                                ncclDevComm_t *outDevComm);

/* Frees what ncclDevCommCreate made for devComm. */
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);

/* Device addresses of byte `offset` of a window, for kernels: through the LSA team's
 * multicast object, through a given multicast object, at LSA rank lsaRank, at world rank
 * peer. *outPtr is NULL (with ncclSuccess) when that mapping does not exist. oxccl: both
 * multimem getters always give NULL. */
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void **outPtr);
ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                              void **outPtr);
ncclResult_t ncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                          ncclMultimemHandle_t multimem, void **outPtr);
ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                           ncclMultimemHandle_t multimem, void **outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                     void **outPtr);
ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank,
                                      void **outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                      void **outPtr);
ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                       void **outPtr);

/* Teams of comm: every rank; the LSA team (ranks that can load and store each other's
 * memory); the rail team (the ranks with this rank's LSA index). oxccl: the LSA team is
 * the whole communicator, so the rail team is this rank alone. */
ncclTeam_t ncclTeamWorld(ncclComm_t comm);
ncclTeam_t pncclTeamWorld(ncclComm_t comm);
ncclTeam_t ncclTeamLsa(ncclComm_t comm);
ncclTeam_t pncclTeamLsa(ncclComm_t comm);
ncclTeam_t ncclTeamRail(ncclComm_t comm);
ncclTeam_t pncclTeamRail(ncclComm_t comm);

/* Rank `rank` of team as a world rank, and as an LSA rank. */
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);

/* Resource requests to chain into ncclDevCommRequirements_t.resourceRequirementsList;
 * the handle becomes valid when ncclDevCommCreate returns. */
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                             ncclLsaBarrierHandle_t *outHandle,
                                             ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                              ncclLsaBarrierHandle_t *outHandle,
                                              ncclDevResourceRequirements_t *outReq);
/* oxccl: it has no GIN, so a device communicator asking for GIN resources is refused. */
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             ncclGinBarrierHandle_t *outHandle,
                                             ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                              ncclGinBarrierHandle_t *outHandle,
                                              ncclDevResourceRequirements_t *outReq);
/* Slots an LL all-to-all needs for maxElts elements of up to maxEltSize bytes. */
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
                                        ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
                                         ncclDevResourceRequirements_t *outReq);
/* Scratch buffers of NCCL's own GIN kernels (exported, declared by no NCCL header). */
ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int size_log2,
                                            struct ncclGinOutboxHandle *outHandle,
                                            ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclGinOutboxCreateRequirement(int nBlocks, int size_log2,
                                             struct ncclGinOutboxHandle *outHandle,
                                             ncclDevResourceRequirements_t *outReq);
ncclResult_t ncclGinInboxA2ACreateRequirement(ncclTeam_t peers, int nBlocks, int size_log2,
                                              struct ncclGinInboxA2AHandle *outHandle,
                                              ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclGinInboxA2ACreateRequirement(ncclTeam_t peers, int nBlocks, int size_log2,
                                               struct ncclGinInboxA2AHandle *outHandle,
                                               ncclDevResourceRequirements_t *outReq);

#endif /* Device API, host side */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
