// What bounds the 8-rank all-gather (issue 3's 0.85x-of-copy target at 256 MiB): the same
// traffic as oxccl's in-process all-gather (8 "ranks" as 8 concurrent kernels on 8 streams,
// each loading its 32 MiB input once and storing it into its block of 8 outputs of 256 MiB)
// under several store and load flavours and per-rank block counts, next to this GPU's
// write-only, read-only and copy bandwidth measured with kernels of the same shape and
// with cudaMemcpyAsync. Every variant's output is checked once (a byte pattern per rank).
//
// Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 benches/micro/fanout.cu -o /tmp/fanout && /tmp/fanout
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(ck_)); exit(1); } } while (0)

constexpr int R = 8;                       // ranks
constexpr size_t C = 32ull << 20;          // input bytes per rank
constexpr size_t OUT = C * R;              // output bytes per rank (256 MiB)

struct Outs { uint4* p[R]; };

enum St { ST_GENERIC, ST_GLOBAL, ST_CS, ST_WT_NA };
enum Ld { LD_GENERIC, LD_NC };

template <St S> __device__ __forceinline__ void st16(uint4* p, uint4 v) {
    if (S == ST_GENERIC) asm volatile("st.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    if (S == ST_GLOBAL) asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    if (S == ST_CS) asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    if (S == ST_WT_NA) asm volatile("st.global.L1::no_allocate.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
template <Ld L> __device__ __forceinline__ uint4 ld16(const uint4* p) {
    uint4 v;
    if (L == LD_GENERIC) asm volatile("ld.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    else asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// oxccl's loop shape: ILP vectors loaded, then each stored to every output.
template <St S, Ld L, int ILP>
__global__ void __launch_bounds__(256) fanout(const uint4* in, Outs outs, int rank) {
    const size_t nvec = C / 16, nt = (size_t)gridDim.x * blockDim.x;
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t base = rank * (C / 16);
    for (; k + (ILP - 1) * nt < nvec; k += ILP * nt) {
        uint4 v[ILP];
#pragma unroll
        for (int i = 0; i < ILP; i++) v[i] = ld16<L>(in + k + i * nt);
#pragma unroll
        for (int q = 0; q < R; q++)
#pragma unroll
            for (int i = 0; i < ILP; i++) st16<S>(outs.p[q] + base + k + i * nt, v[i]);
    }
    for (; k < nvec; k += nt) {
        uint4 v = ld16<L>(in + k);
        for (int q = 0; q < R; q++) st16<S>(outs.p[q] + base + k, v);
    }
}

// Tile-major: each block takes tiles of ILP x 256 consecutive vectors (16 KiB at ILP4), loads
// one tile, then stores it whole to one destination after another, starting at destination
// (rank + block) % R when ROT (so that at any moment the blocks of the GPU spread their
// stores over all outputs instead of all writing output 0, 1, ... in step).
template <St S, int ILP, bool ROT>
__global__ void __launch_bounds__(256) fanout_tile(const uint4* in, Outs outs, int rank) {
    const size_t nvec = C / 16, tile = ILP * 256;
    const size_t base = rank * (C / 16);
    const int q0 = ROT ? (rank + blockIdx.x) % R : 0;
    for (size_t t = (size_t)blockIdx.x * tile; t < nvec; t += (size_t)gridDim.x * tile) {
        uint4 v[ILP];
#pragma unroll
        for (int i = 0; i < ILP; i++) v[i] = ld16<LD_GENERIC>(in + t + i * 256 + threadIdx.x);
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int q = ROT ? (q0 + j) % R : j;
#pragma unroll
            for (int i = 0; i < ILP; i++) st16<S>(outs.p[q] + base + t + i * 256 + threadIdx.x, v[i]);
        }
    }
}

template <St S>
__global__ void __launch_bounds__(256) fill(uint4* out, size_t nvec) {
    const size_t nt = (size_t)gridDim.x * blockDim.x;
    uint4 v = make_uint4(1, 2, 3, 4);
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < nvec; k += nt) st16<S>(out + k, v);
}
__global__ void __launch_bounds__(256) copyk(const uint4* in, uint4* out, size_t nvec) {
    const size_t nt = (size_t)gridDim.x * blockDim.x;
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; k + 3 * nt < nvec; k += 4 * nt) {
        uint4 a = in[k], b = in[k + nt], c = in[k + 2 * nt], d = in[k + 3 * nt];
        out[k] = a; out[k + nt] = b; out[k + 2 * nt] = c; out[k + 3 * nt] = d;
    }
    for (; k < nvec; k += nt) out[k] = in[k];
}
__global__ void __launch_bounds__(256) readk(const uint4* in, size_t nvec, uint32_t* sink) {
    const size_t nt = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < nvec; k += nt) { uint4 v = in[k]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
    if (acc == 0x9e3779b9u) *sink = acc;
}

static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main() {
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, sms);
    uint4* in[R]; Outs outs;
    for (int r = 0; r < R; r++) {
        CK(cudaMalloc(&in[r], C)); CK(cudaMemset(in[r], 0x11 * (r + 1), C));
        CK(cudaMalloc(&outs.p[r], OUT));
    }
    cudaStream_t s[R]; cudaEvent_t e0, e1, done[R];
    for (int r = 0; r < R; r++) { CK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking)); CK(cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming)); }
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const int iters = 10, reps = 9;
    // Time `launch(r)` on every rank's stream at once, `iters` back to back per rep.
    auto time_ranks = [&](auto launch) {
        std::vector<double> t;
        for (int rep = 0; rep < reps + 1; rep++) {
            CK(cudaEventRecord(e0, s[0]));
            for (int r = 1; r < R; r++) CK(cudaStreamWaitEvent(s[r], e0));
            for (int it = 0; it < iters; it++) for (int r = 0; r < R; r++) launch(r);
            for (int r = 1; r < R; r++) { CK(cudaEventRecord(done[r], s[r])); CK(cudaStreamWaitEvent(s[0], done[r])); }
            CK(cudaEventRecord(e1, s[0])); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep) t.push_back(ms * 1e3 / iters);
        }
        CK(cudaGetLastError());
        return median(t);
    };
    auto time_one = [&](auto launch) {
        std::vector<double> t;
        for (int rep = 0; rep < reps + 1; rep++) {
            CK(cudaEventRecord(e0, s[0]));
            for (int it = 0; it < iters; it++) launch();
            CK(cudaEventRecord(e1, s[0])); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep) t.push_back(ms * 1e3 / iters);
        }
        CK(cudaGetLastError());
        return median(t);
    };
    // Ceilings: 256 MiB per op, kernels over the whole GPU (4 blocks of 256 per SM) and the copy engine path.
    const size_t B = OUT, nv = B / 16; const int g = sms * 4;
    uint32_t* sink; CK(cudaMalloc(&sink, 4));
    double t_memcpy = time_one([&] { CK(cudaMemcpyAsync(outs.p[1], outs.p[0], B, cudaMemcpyDeviceToDevice, s[0])); });
    double t_copy = time_one([&] { copyk<<<g, 256, 0, s[0]>>>(outs.p[0], outs.p[1], nv); });
    double t_fill = time_one([&] { fill<ST_GLOBAL><<<g, 256, 0, s[0]>>>(outs.p[0], nv); });
    double t_fill_cs = time_one([&] { fill<ST_CS><<<g, 256, 0, s[0]>>>(outs.p[0], nv); });
    double t_read = time_one([&] { readk<<<g, 256, 0, s[0]>>>(outs.p[0], nv, sink); });
    double copy_gbs = 2.0 * B / t_memcpy / 1e3;
    printf("256 MiB: cudaMemcpyAsync D2D %.1f us = %.0f GB/s (r+w) | copy kernel %.0f GB/s | write-only %.0f GB/s (cs %.0f) | read-only %.0f GB/s\n",
           t_memcpy, copy_gbs, 2.0 * B / t_copy / 1e3, B / t_fill / 1e3, B / t_fill_cs / 1e3, B / t_read / 1e3);
    // The all-gather traffic: 8 ranks x (32 MiB read + 8 x 32 MiB written) = 9 x 256 MiB.
    const double alg = 9.0 * OUT;
    struct V { const char* name; void (*k)(const uint4*, Outs, int); };
    V vs[] = {
        {"generic st, ILP4 (oxccl)", fanout<ST_GENERIC, LD_GENERIC, 4>},
        {"st.global, ILP4", fanout<ST_GLOBAL, LD_GENERIC, 4>},
        {"st.global.cs, ILP4", fanout<ST_CS, LD_GENERIC, 4>},
        {"st.global.L1::no_allocate, ILP4", fanout<ST_WT_NA, LD_GENERIC, 4>},
        {"ld.nc + st.global.cs, ILP4", fanout<ST_CS, LD_NC, 4>},
        {"generic st, ILP2", fanout<ST_GENERIC, LD_GENERIC, 2>},
        {"generic st, ILP8", fanout<ST_GENERIC, LD_GENERIC, 8>},
        {"st.global.cs, ILP8", fanout<ST_CS, LD_GENERIC, 8>},
        {"tile ILP4, dst 0..7", fanout_tile<ST_GENERIC, 4, false>},
        {"tile ILP4, dst rotated", fanout_tile<ST_GENERIC, 4, true>},
        {"tile ILP4 cs, dst rotated", fanout_tile<ST_CS, 4, true>},
        {"tile ILP8, dst rotated", fanout_tile<ST_GENERIC, 8, true>},
    };
    printf("%-34s %8s %10s %10s %7s\n", "8-rank all-gather traffic", "blocks", "time(us)", "alg GB/s", "ratio");
    for (const V& v : vs) {
        for (int blocks : {sms / 4, sms / 2, sms, 2 * sms / 1}) {
            for (int r = 0; r < R; r++) CK(cudaMemsetAsync(outs.p[r], 0xff, OUT, s[0]));
            CK(cudaStreamSynchronize(s[0]));
            double t = time_ranks([&](int r) { v.k<<<blocks, 256, 0, s[r]>>>(in[r], outs, r); });
            // check: block r of every output holds rank r's byte
            bool ok = true;
            for (int q = 0; q < R && ok; q++) for (int r = 0; r < R && ok; r++) {
                unsigned char b[2];
                CK(cudaMemcpy(&b[0], (char*)outs.p[q] + r * C, 1, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(&b[1], (char*)outs.p[q] + r * C + C - 1, 1, cudaMemcpyDeviceToHost));
                ok = b[0] == (unsigned char)(0x11 * (r + 1)) && b[1] == b[0];
            }
            printf("%-34s %8d %10.1f %10.0f %7.3f %s\n", v.name, blocks, t, alg / t / 1e3, alg / t / 1e3 / copy_gbs, ok ? "" : "WRONG");
        }
    }
    return 0;
}
