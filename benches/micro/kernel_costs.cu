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
    cudaStream_t s[2]; for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    cudaEvent_t ev[8]; for (auto& e : ev) CK(cudaEventCreate(&e));
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
    return 0;
}
