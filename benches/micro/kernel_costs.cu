// What single device operations cost inside a kernel replayed from a CUDA graph (issue 4's
// latency floor question): each kernel is one block of 256 threads (the symmetric kernels'
// block), thread 0 does the operation once, the graph holds 20 launches on one stream (or 2
// streams, 20 each, like two ranks), replayed 20 times; median over 7 repetitions, us per launch.
// Build and run on the GPU machine: nvcc -O2 -arch=sm_90 kernel_costs.cu -o /tmp/kc && /tmp/kc
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(ck_)); return 1; } } while (0)

__global__ void k_empty(uint64_t*) {}
__global__ void k_bar(uint64_t*) { __syncthreads(); }
__global__ void k_ldst(uint64_t* p) {
    if (threadIdx.x == 0) { uint64_t v; asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p)); asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(p + 1), "l"(v + 1)); }
}
__global__ void k_ld_bar_st(uint64_t* p) {
    uint64_t v; asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p + 8 + threadIdx.x % 8));
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(p + 8), "l"(v + 1));
}
__global__ void k_fence_sys(uint64_t*) { if (threadIdx.x == 0) asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__global__ void k_fence_gpu(uint64_t*) { if (threadIdx.x == 0) asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
__global__ void k_fence_sc_sys(uint64_t*) { if (threadIdx.x == 0) asm volatile("fence.sc.sys;" ::: "memory"); }
__global__ void k_st_fence_sys(uint64_t* p) {
    if (threadIdx.x == 0) { asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(p + 2), "l"(1ull)); asm volatile("fence.acq_rel.sys;" ::: "memory"); }
}
__global__ void k_st_fence_gpu(uint64_t* p) {
    if (threadIdx.x == 0) { asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(p + 2), "l"(1ull)); asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
}
__global__ void k_rel_acq_sys(uint64_t* p) {
    if (threadIdx.x == 0) { uint64_t v; asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p + 3), "l"(1ull)); asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p + 3)); p[4] = v; }
}
__global__ void k_rel_acq_gpu(uint64_t* p) {
    if (threadIdx.x == 0) { uint64_t v; asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(p + 3), "l"(1ull)); asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p + 3)); p[4] = v; }
}
__global__ void k_timer(uint64_t* p) {
    if (threadIdx.x == 0) { uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); p[5] = t; }
}
// A barrier with ourselves as the symmetric Simple kernels do it: fence + release store + acquire poll + bar.sync.
__global__ void k_self_barrier_sys(uint64_t* p) {
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t e; asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(e) : "l"(p + 6));
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p + 6), "l"(e + 1));
        uint64_t v; do { asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p + 6)); } while (v < e + 1);
    }
    __syncthreads();
}
__global__ void k_self_barrier_gpu(uint64_t* p) {
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t e; asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(e) : "l"(p + 7));
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        asm volatile("st.release.gpu.global.u64 [%0], %1;" :: "l"(p + 7), "l"(e + 1));
        uint64_t v; do { asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p + 7)); } while (v < e + 1);
    }
    __syncthreads();
}

typedef void (*K)(uint64_t*);

// An ideal Lamport one-shot all-reduce written directly in CUDA, the floor our Rust kernels are
// measured against: rank r (stream r) owns slot[r], in[r], out[r] and a mailbox of 3 buffers x
// nranks sources x LINES lines of 16 bytes, poisoned with SENTINEL words. Thread t moves line t
// (4 KiB payload with 256 threads; `lines` active threads). Variants, from most to least ordered:
//   serial: seq load, bar.sync, fence.acq_rel.gpu, input load, publish, poll, poison, store;
//   prefetch: serial, with a prefetch.L1 of the input issued before the seq load;
//   hoist:  input load issued before the seq load (both in flight together), then the same;
//   nofence: hoist without the writer's fence;  nobar: nofence without the bar.sync (not safe
//   for more than one warp: measures the barrier's cost only).
#define SENT 0xFFFAFFFAu
#define LINES 256
struct Lam { uint64_t* slot; float4* in; float4* out; uint4* box; int n; int lines; };
__device__ __forceinline__ uint4* box_of(const Lam& L, int rank, int buf, int src) {
    return L.box + ((size_t)(rank * 3 + buf) * L.n + src) * LINES;
}
// PDL: launched with programmatic stream serialization; the kernel lets the next one in its
// stream be scheduled at once (griddepcontrol.launch_dependents) and waits for the previous one
// to have finished and flushed (griddepcontrol.wait) before it touches any memory.
// TL: thread 0 adds the SM clock cycles of each phase into g_tl[me] (entry->wait->seq load and
// bar.sync->fence->publish->poll and store->end), for the phase table printed after the timings.
__device__ unsigned long long g_tl[8][8];
__device__ __forceinline__ uint64_t clk() { uint64_t c; asm volatile("mov.u64 %0, %%clock64;" : "=l"(c) :: "memory"); return c; }
template <int MODE, bool PDL = false, bool TL = false>
__global__ void k_lamport(Lam L, int me) {
    uint64_t c0 = TL ? clk() : 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0;
    if (PDL) { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); asm volatile("griddepcontrol.wait;" ::: "memory"); }
    if (TL) c1 = clk();
    int t = threadIdx.x;
    float4 v = make_float4(0, 0, 0, 0);
    uint64_t seq;
    bool act = t < L.lines;
    if (MODE == 1 && act) asm volatile("prefetch.L1 [%0];" :: "l"(L.in + me * LINES + t));
    if (MODE >= 2 && act) v = L.in[me * LINES + t];
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(seq) : "l"(L.slot + me * 8));
    if (MODE < 4) __syncthreads();
    if (TL) c2 = clk();
    if (MODE < 3) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    if (TL) c3 = clk();
    if (MODE <= 1 && act) v = L.in[me * LINES + t];
    int buf = seq % 3;
    if (act) {
        uint4 w = *reinterpret_cast<uint4*>(&v);
        for (int k = 1; k < L.n; k++) {
            int q = (me + k) % L.n;
            uint4* d = box_of(L, q, buf, me) + t;
            asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(d), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w) : "memory");
        }
        if (TL) c4 = clk();
        float4 acc = make_float4(0, 0, 0, 0);
        for (int q = 0; q < L.n; q++) {
            float4 x;
            if (q == me) x = v; else {
                uint4* s = box_of(L, me, buf, q) + t; uint4 r;
                long spins = 0;
                do { asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(s) : "memory"); }
                while ((r.x == SENT || r.y == SENT || r.z == SENT || r.w == SENT) && ++spins < (1l << 26));
                asm volatile("st.volatile.global.v4.u32 [%0], {%1,%1,%1,%1};" :: "l"(s), "r"(SENT) : "memory");
                x = *reinterpret_cast<float4*>(&r);
            }
            acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
        }
        L.out[me * LINES + t] = acc;
        if (TL) c5 = clk();
    }
    if (MODE < 4) __syncthreads();
    if (t == 0) asm volatile("st.volatile.global.u64 [%0], %1;" :: "l"(L.slot + me * 8), "l"(seq + 1) : "memory");
    if (TL && t == 0) {
        uint64_t c6 = clk(), c[7] = {c0, c1, c2, c3, c4, c5, c6};
        for (int i = 0; i < 6; i++) atomicAdd(&g_tl[me][i], c[i + 1] - c[i]);
        atomicAdd(&g_tl[me][6], 1ull);
    }
}
__global__ void k_poison(uint4* b, size_t n) { for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) b[i] = make_uint4(SENT, SENT, SENT, SENT); }
__global__ void k_lam_empty(Lam, int) {}
__global__ void k_lam_empty_pdl(Lam, int) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); asm volatile("griddepcontrol.wait;" ::: "memory");
}
static void launch(void (*k)(Lam, int), Lam L, int i, cudaStream_t s, bool pdl) {
    if (!pdl) { k<<<1, 256, 0, s>>>(L, i); return; }
    cudaLaunchConfig_t c = {}; cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    c.gridDim = dim3(1); c.blockDim = dim3(256); c.stream = s; c.attrs = a; c.numAttrs = 1;
    cudaLaunchKernelEx(&c, k, L, i);
}

typedef void (*KL)(Lam, int);
// Median us per operation (one kernel per rank per op, rank r on stream r), and whether every
// output element of the last replay equals the sum of the inputs.
static double time_lamport(KL k, Lam L, cudaStream_t* s, cudaEvent_t* ev, bool* ok, bool pdl = false) {
    cudaGraph_t g; cudaGraphExec_t ge;
    const int per = 20, replays = 20;
    cudaStreamBeginCapture(s[0], cudaStreamCaptureModeRelaxed);
    cudaEventRecord(ev[2], s[0]);
    for (int i = 1; i < L.n; i++) cudaStreamWaitEvent(s[i], ev[2], 0);
    for (int j = 0; j < per; j++) for (int i = 0; i < L.n; i++) launch(k, L, i, s[i], pdl);
    for (int i = 1; i < L.n; i++) { cudaEventRecord(ev[8 + i], s[i]); cudaStreamWaitEvent(s[0], ev[8 + i], 0); }
    cudaError_t ce = cudaStreamEndCapture(s[0], &g);
    if (ce == cudaSuccess) ce = cudaGraphInstantiate(&ge, g, 0);
    if (ce != cudaSuccess) { printf("capture (pdl=%d): %s\n", pdl, cudaGetErrorString(ce)); *ok = false; return -1; }
    cudaMemset(L.out, 0xff, sizeof(float4) * LINES * L.n);
    cudaGraphLaunch(ge, s[0]); cudaStreamSynchronize(s[0]);
    std::vector<float4> in(LINES * L.n), out(LINES * L.n);
    cudaMemcpy(in.data(), L.in, in.size() * 16, cudaMemcpyDeviceToHost);
    cudaMemcpy(out.data(), L.out, out.size() * 16, cudaMemcpyDeviceToHost);
    *ok = cudaGetLastError() == cudaSuccess;
    for (int r = 0; r < L.n && k != k_lam_empty && k != k_lam_empty_pdl; r++) for (int t = 0; t < L.lines; t++) {
        float e = 0; for (int q = 0; q < L.n; q++) e += in[q * LINES + t].x;
        if (out[r * LINES + t].x != e) *ok = false;
    }
    std::vector<double> tt;
    for (int r = 0; r < 7; r++) {
        cudaEventRecord(ev[0], s[0]);
        for (int i = 0; i < replays; i++) cudaGraphLaunch(ge, s[0]);
        cudaEventRecord(ev[1], s[0]);
        cudaEventSynchronize(ev[1]);
        float ms; cudaEventElapsedTime(&ms, ev[0], ev[1]);
        tt.push_back(ms * 1000.0 / (per * replays));
    }
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    std::sort(tt.begin(), tt.end());
    return tt[3];
}

static int lamport_table(cudaStream_t* s, cudaEvent_t* ev) {
    printf("\nideal CUDA Lamport all-reduce (1 block x 256, graph of 20 ops, us per op)\n");
    printf("%-6s %-8s %10s %10s %10s %10s %10s %10s | PDL: %10s %10s %10s %10s\n", "ranks", "payload", "empty", "serial", "prefetch", "hoist", "nofence", "nobar",
           "empty", "empty+wait", "serial", "nofence");
    for (int n : {1, 2, 8}) for (int lines : {1, 256}) {
        Lam L; L.n = n; L.lines = lines;
        size_t boxes = (size_t)n * 3 * n * LINES;
        CK(cudaMalloc(&L.slot, 8 * 8 * n)); CK(cudaMemset(L.slot, 0, 8 * 8 * n));
        CK(cudaMalloc(&L.in, 16 * LINES * n)); CK(cudaMalloc(&L.out, 16 * LINES * n));
        CK(cudaMalloc(&L.box, 16 * boxes));
        std::vector<float4> in(LINES * n);
        for (size_t i = 0; i < in.size(); i++) { float f = (float)((i * 7919) % 1000) * 0.25f; in[i] = make_float4(f, f + 1, f + 2, f + 3); }
        CK(cudaMemcpy(L.in, in.data(), in.size() * 16, cudaMemcpyHostToDevice));
        k_poison<<<64, 256>>>(L.box, boxes); CK(cudaDeviceSynchronize());
        bool ok[10]; double t[10];
        KL ks[10] = {k_lam_empty, k_lamport<0>, k_lamport<1>, k_lamport<2>, k_lamport<3>, k_lamport<4>,
                     k_lam_empty, k_lam_empty_pdl, k_lamport<0, true>, k_lamport<3, true>};
        for (int i = 0; i < 10; i++) t[i] = time_lamport(ks[i], L, s, ev, &ok[i], i >= 6);
        printf("%-6d %-8d", n, lines * 16);
        for (int i = 0; i < 10; i++) printf(" %8.3f%s%s", t[i], ok[i] ? "  " : "!!", i == 5 ? " |     " : "");
        printf("\n");
        // The phase table of the serial kernel under PDL (its timing, slightly raised by the marks, in the last column).
        unsigned long long z[8][8] = {}, tl[8][8];
        CK(cudaMemcpyToSymbol(g_tl, z, sizeof z));
        bool tok; double tt = time_lamport(k_lamport<0, true, true>, L, s, ev, &tok, true);
        CK(cudaMemcpyFromSymbol(tl, g_tl, sizeof tl));
        printf("  phases (cycles, mean over ops, rank 0): wait %.0f seq+bar %.0f fence %.0f publish %.0f poll+store %.0f end %.0f  [%.3f us/op%s]\n",
               tl[0][0] / (double)tl[0][6], tl[0][1] / (double)tl[0][6], tl[0][2] / (double)tl[0][6], tl[0][3] / (double)tl[0][6],
               tl[0][4] / (double)tl[0][6], tl[0][5] / (double)tl[0][6], tt, tok ? "" : " !!");
        cudaFree(L.slot); cudaFree(L.in); cudaFree(L.out); cudaFree(L.box);
    }
    printf("(!! = some output element differed from the sum of the inputs)\n");
    return 0;
}
static double time_graph(K k, int nstreams, uint64_t* p, cudaStream_t* s, cudaEvent_t* ev) {
    cudaGraph_t g; cudaGraphExec_t ge;
    const int per = 20, replays = 20;
    cudaStreamBeginCapture(s[0], cudaStreamCaptureModeRelaxed);
    cudaEventRecord(ev[2], s[0]);
    for (int i = 1; i < nstreams; i++) cudaStreamWaitEvent(s[i], ev[2], 0);
    for (int j = 0; j < per; j++) for (int i = 0; i < nstreams; i++) k<<<1, 256, 0, s[i]>>>(p + 64 * i);
    for (int i = 1; i < nstreams; i++) { cudaEventRecord(ev[3 + i], s[i]); cudaStreamWaitEvent(s[0], ev[3 + i], 0); }
    cudaStreamEndCapture(s[0], &g);
    cudaGraphInstantiate(&ge, g, 0);
    cudaGraphLaunch(ge, s[0]); cudaStreamSynchronize(s[0]);
    std::vector<double> t;
    for (int r = 0; r < 7; r++) {
        cudaEventRecord(ev[0], s[0]);
        for (int i = 0; i < replays; i++) cudaGraphLaunch(ge, s[0]);
        cudaEventRecord(ev[1], s[0]);
        cudaEventSynchronize(ev[1]);
        float ms; cudaEventElapsedTime(&ms, ev[0], ev[1]);
        t.push_back(ms * 1000.0 / (per * replays));
    }
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    std::sort(t.begin(), t.end());
    return t[3];
}

int main() {
    uint64_t* p; CK(cudaMalloc(&p, 1 << 16)); CK(cudaMemset(p, 0, 1 << 16));
    cudaStream_t s[8]; for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    cudaEvent_t ev[16]; for (auto& e : ev) CK(cudaEventCreate(&e));
    struct { const char* n; K k; } ks[] = {
        {"empty", k_empty}, {"bar.sync", k_bar}, {"ld+st volatile", k_ldst}, {"ld, bar.sync, st", k_ld_bar_st},
        {"fence.acq_rel.sys", k_fence_sys}, {"fence.acq_rel.gpu", k_fence_gpu}, {"fence.sc.sys", k_fence_sc_sys},
        {"st + fence.acq_rel.sys", k_st_fence_sys}, {"st + fence.acq_rel.gpu", k_st_fence_gpu},
        {"st.release.sys + ld.acquire.sys", k_rel_acq_sys}, {"st.release.gpu + ld.acquire.gpu", k_rel_acq_gpu},
        {"globaltimer", k_timer}, {"self barrier (sys)", k_self_barrier_sys}, {"self barrier (gpu)", k_self_barrier_gpu},
    };
    printf("%-36s %12s %12s\n", "kernel (1 block x 256, thread 0 acts)", "1 stream", "2 streams");
    for (auto& k : ks) {
        double a = time_graph(k.k, 1, p, s, ev), b = time_graph(k.k, 2, p, s, ev);
        printf("%-36s %10.3f us %10.3f us\n", k.n, a, b);
    }
    CK(cudaDeviceSynchronize());
    return lamport_table(s, ev);
}
