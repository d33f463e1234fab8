// The host's floor for enqueueing one kernel (what `oxccl perf --host` is compared with):
// the wall time of a loop of N launches of an empty kernel taking one 256-byte argument by
// value (the size of oxccl's SymArgs), on 1 or 8 streams round-robin (8 ranks sharing one
// device, one thread enqueueing for all, as `oxccl perf` does), through the runtime's <<<>>>,
// cudaLaunchKernelEx with programmatic stream serialization (PDL, as the symmetric kernels
// launch), and the driver's cuLaunchKernel / cuLaunchKernelEx. The streams are drained
// before each repetition; median of 9 repetitions of 64 launches per stream, us per launch.
// Build and run on the GPU machine:
//   nvcc -O2 -arch=sm_90 launch_cost.cu -lcuda -o /tmp/lc && /tmp/lc
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>
#include <vector>

#define CK(x) do { cudaError_t ck_ = (x); if (ck_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(ck_)); return 1; } } while (0)
#define CD(x) do { CUresult cd_ = (x); if (cd_ != CUDA_SUCCESS) { printf("%s: %d\n", #x, (int)cd_); return 1; } } while (0)

struct Args { uint64_t w[32]; };
static_assert(sizeof(Args) == 256, "SymArgs is 256 bytes");

__global__ void k_empty(Args) {}

enum Way { RUNTIME, RUNTIME_PDL, DRIVER, DRIVER_PDL };
static const char* NAMES[] = {"<<<>>>", "cudaLaunchKernelEx+PDL", "cuLaunchKernel", "cuLaunchKernelEx+PDL"};

static int launch(Way w, cudaStream_t s, CUfunction f, Args& a, unsigned blocks) {
    switch (w) {
    case RUNTIME: k_empty<<<blocks, 512, 0, s>>>(a); CK(cudaGetLastError()); return 0;
    case RUNTIME_PDL: {
        cudaLaunchConfig_t c = {}; cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        c.gridDim = blocks; c.blockDim = 512; c.stream = s; c.attrs = at; c.numAttrs = 1;
        CK(cudaLaunchKernelEx(&c, k_empty, a)); return 0;
    }
    case DRIVER: {
        void* p[] = {&a};
        CD(cuLaunchKernel(f, blocks, 1, 1, 512, 1, 1, 0, (CUstream)s, p, nullptr)); return 0;
    }
    case DRIVER_PDL: {
        CUlaunchAttribute at[1] = {};
        at[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        at[0].value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig c = {}; c.gridDimX = blocks; c.gridDimY = c.gridDimZ = 1;
        c.blockDimX = 512; c.blockDimY = c.blockDimZ = 1; c.hStream = (CUstream)s; c.attrs = at; c.numAttrs = 1;
        void* p[] = {&a};
        CD(cuLaunchKernelEx(&c, f, p, nullptr)); return 0;
    }
    }
    return 1;
}

int main() {
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    CUfunction f;
    CK(cudaGetFuncBySymbol((cudaFunction_t*)&f, (const void*)k_empty));
    Args a = {};
    cudaStream_t st[8];
    for (auto& s : st) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int N = 64, REPS = 9;
    printf("%-24s %7s %7s %12s\n", "launch", "streams", "blocks", "host us/launch");
    for (int w = RUNTIME; w <= DRIVER_PDL; w++)
        for (int ns : {1, 8})
            for (unsigned blocks : {1u, 16u}) {
                std::vector<double> t;
                for (int r = 0; r < REPS + 1; r++) {
                    CK(cudaDeviceSynchronize());
                    auto t0 = std::chrono::steady_clock::now();
                    for (int i = 0; i < N; i++)
                        for (int k = 0; k < ns; k++)
                            if (launch((Way)w, st[k], f, a, blocks)) return 1;
                    auto t1 = std::chrono::steady_clock::now();
                    if (r > 0) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / (N * ns));
                }
                std::sort(t.begin(), t.end());
                printf("%-24s %7d %7u %12.2f\n", NAMES[w], ns, blocks, t[t.size() / 2]);
            }
    CK(cudaDeviceSynchronize());
    return 0;
}
