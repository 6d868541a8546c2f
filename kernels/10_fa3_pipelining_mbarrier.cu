// 10_fa3_pipelining, building block 2: a producer warp hands chunks to a consumer warp through
// a ring of shared-memory stages guarded by mbarriers, the copies made by cp.async.bulk.
//
//   mbarrier_ring(in, out, n_chunks)
//
// in, out: float32 arrays of n_chunks * 256 values (1 KB chunks). out[i*256 + j] =
// 2 * in[i*256 + j] + (i % STAGES): the consumer tags each value with the stage it came through,
// so a test sees the hand-off order too. Launch: grid 1, block 64 (warp 0 produces, warp 1
// consumes), dynamic shared memory STAGES * 1 KB + 1 KB.
//
// Two barriers per stage. full[s]: the producer's lane 0 arrives once with expect_tx(1024) and
// the bulk copy completes 1024 transaction bytes on it; the phase ends when both happened.
// empty[s]: each of the consumer's 32 lanes arrives once it has read its part of the stage
// (a lane releases its own reads; with __syncwarp and one arrival from lane 0 the ordering holds
// through bar.warp.sync, but compute-sanitizer's racecheck reports it as a race). Use u of stage s (chunk
// i = u * STAGES + s) waits on full[s] with parity u & 1, and the producer waits on empty[s]
// with parity (u - 1) & 1 before it overwrites the stage for use u >= 1.
// sm_90a only (cp.async.bulk itself is sm_90; the file shares the chapter's sm_90a guard).
#include "10_fa3_pipelining.cuh"

constexpr int RING_STAGES = 2;
constexpr int RING_CHUNK = 256;        // floats per chunk: 1 KB
constexpr int RING_THREADS = 64;       // warp 0 produces, warp 1 consumes
// The launch numbers (fraglab.launch.constants reads them): the chunk, the ring's depth, the
// block, and the dynamic shared memory (the stages, then the barriers in the 256 bytes after).
extern "C" __device__ const int ring_chunk = RING_CHUNK;
extern "C" __device__ const int ring_stages = RING_STAGES;
extern "C" __device__ const int ring_threads = RING_THREADS;
extern "C" __device__ const int ring_smem = RING_STAGES * RING_CHUNK * 4 + 256;

#if FRAGLAB_SM90A

__device__ void ring(const float* __restrict__ in, float* __restrict__ out, int n_chunks) {
    extern __shared__ unsigned char smem_raw[];
    const u32 raw = smem_u32(smem_raw);
    const u32 pad = ((raw + 127) & ~127u) - raw;
    float* buf = (float*)(smem_raw + pad);                      // STAGES x 1 KB
    const u32 sbuf = raw + pad;
    const u32 full = sbuf + RING_STAGES * RING_CHUNK * 4;       // 8 bytes each
    const u32 empty = full + 8 * RING_STAGES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < RING_STAGES; ++s) { mbar_init(full + 8 * s, 1); mbar_init(empty + 8 * s, 32); }
        mbar_init_fence();
    }
    __syncthreads();
    for (int i = 0; i < n_chunks; ++i) {
        const int s = i % RING_STAGES, u = i / RING_STAGES;
        if (warp == 0) {                                        // producer
            if (lane == 0) {
                if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);
                mbar_arrive_expect_tx(full + 8 * s, RING_CHUNK * 4);
                bulk_copy_g2s(sbuf + s * RING_CHUNK * 4, in + (long)i * RING_CHUNK, RING_CHUNK * 4,
                              full + 8 * s);
            }
        } else {                                                // consumer
            mbar_wait(full + 8 * s, u & 1);
            for (int j = lane; j < RING_CHUNK; j += 32)
                out[(long)i * RING_CHUNK + j] = 2.f * buf[s * RING_CHUNK + j] + (float)s;
            mbar_arrive(empty + 8 * s);                         // every lane: 32 arrivals
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(RING_THREADS)
mbarrier_ring(const float* in, float* out, int n_chunks) { SM90A_ONLY(ring(in, out, n_chunks)); }
