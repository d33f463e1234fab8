; A user kernel written against the oxccl Device API (ptx/oxccl_device.h), in LLVM IR for
; the LLVM of rustup's llvm-tools (22; kernels marked by the ptx_kernel calling convention).
; Linked with ptx/oxccl_device.bc by builder/tests/link_user_kernel.rs and
; scripts/link-user-kernel.sh; run on a GPU by `oxccl devapi-run --ptx FILE --ranks N`.
;
; oxccl_user_sum(const OxcclDevComm* comm, const OxcclWindow* win, uint64_t* out), one
; thread per rank (grid 1 x 1, coop OXCCL_COOP_THREAD):
;   1. for every LSA peer q: peer q's u64 slot `lsa_rank` of `win` = lsa_rank + 1;
;   2. LSA barrier 0: init, sync (acq_rel), end;
;   3. out[0] = sum of this rank's slots 0 .. lsa_size (= n (n + 1) / 2),
;      out[1] = the first non-zero status of init and sync (0 = success),
;      out[2] = lsa_size, out[3] = oxccl_dev_version().
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

%OxcclLsaBarrierSession = type { [12 x i64] }

declare i32 @oxccl_dev_version()
declare i32 @oxccl_dev_lsa_rank(ptr)
declare i32 @oxccl_dev_lsa_size(ptr)
declare ptr @oxccl_dev_lsa_ptr(ptr, i64, i32)
declare ptr @oxccl_dev_local_ptr(ptr, i64)
declare i32 @oxccl_dev_lsa_barrier_init(ptr, ptr, i32, i32)
declare i32 @oxccl_dev_lsa_barrier_sync(ptr, i32)
declare void @oxccl_dev_lsa_barrier_end(ptr)

define ptx_kernel void @oxccl_user_sum(ptr %comm, ptr %win, ptr %out) {
entry:
  %session = alloca %OxcclLsaBarrierSession, align 8
  %me = call i32 @oxccl_dev_lsa_rank(ptr %comm)
  %n = call i32 @oxccl_dev_lsa_size(ptr %comm)
  %me64 = zext i32 %me to i64
  %slot = mul i64 %me64, 8
  %value = add i64 %me64, 1
  %any = icmp ugt i32 %n, 0
  br i1 %any, label %put, label %barrier

put:
  %q = phi i32 [ 0, %entry ], [ %q.next, %put ]
  %dst = call ptr @oxccl_dev_lsa_ptr(ptr %win, i64 %slot, i32 %q)
  store i64 %value, ptr %dst, align 8
  %q.next = add i32 %q, 1
  %more = icmp ult i32 %q.next, %n
  br i1 %more, label %put, label %barrier

barrier:
  ; OXCCL_COOP_THREAD = 0, barrier index 0.
  %init = call i32 @oxccl_dev_lsa_barrier_init(ptr %session, ptr %comm, i32 0, i32 0)
  %init.ok = icmp eq i32 %init, 0
  br i1 %init.ok, label %sync, label %done

sync:
  ; cuda::std::memory_order_acq_rel = 4.
  %sync.st = call i32 @oxccl_dev_lsa_barrier_sync(ptr %session, i32 4)
  call void @oxccl_dev_lsa_barrier_end(ptr %session)
  br i1 %any, label %sum, label %done

sum:
  %s = phi i32 [ 0, %sync ], [ %s.next, %sum ]
  %acc = phi i64 [ 0, %sync ], [ %acc.next, %sum ]
  %s64 = zext i32 %s to i64
  %off = mul i64 %s64, 8
  %src = call ptr @oxccl_dev_local_ptr(ptr %win, i64 %off)
  %v = load i64, ptr %src, align 8
  %acc.next = add i64 %acc, %v
  %s.next = add i32 %s, 1
  %more.s = icmp ult i32 %s.next, %n
  br i1 %more.s, label %sum, label %done

done:
  %total = phi i64 [ 0, %barrier ], [ 0, %sync ], [ %acc.next, %sum ]
  %status = phi i32 [ %init, %barrier ], [ %sync.st, %sync ], [ %sync.st, %sum ]
  %status64 = zext i32 %status to i64
  %n64 = zext i32 %n to i64
  %ver = call i32 @oxccl_dev_version()
  %ver64 = zext i32 %ver to i64
  store i64 %total, ptr %out, align 8
  %out1 = getelementptr inbounds i64, ptr %out, i64 1
  store i64 %status64, ptr %out1, align 8
  %out2 = getelementptr inbounds i64, ptr %out, i64 2
  store i64 %n64, ptr %out2, align 8
  %out3 = getelementptr inbounds i64, ptr %out, i64 3
  store i64 %ver64, ptr %out3, align 8
  ret void
}
