// 05_flash_attention (part 1 of 2): a FlashAttention-1 style kernel with three softmax paths.
//
// Section 5 of the in-register WMMA paper (Morales 2025) puts its in-register softmax (Alg. 4)
// into a FlashAttention-1 style kernel and reports 1.36x over a shared-memory baseline on an H100
// (Table 6). The three kernels below are one kernel with three softmax paths, so that a timing
// difference can only come from the softmax:
//
//   fa1_paper_baseline_d<D>  a baseline with the traits of the paper's public baseline: S goes to
//                            shared memory, 8 of the 32 lanes walk its 16 rows serially (2 rows
//                            each), every exponential is computed twice (once for the row sum,
//                            once for P) and __syncthreads() separates the passes.
//   fa1_fair_baseline_d<D>   the same round trip done well: all 32 lanes (2 per row, 8 columns
//                            each), one exponential per element, one __syncwarp() per pass.
//   fa1_inregister_d<D>      Alg. 4: the softmax runs on the accumulator fragment itself (row
//                            max and row sum by quad reductions, Alg. 3), S never touches shared
//                            memory; only P (f16) is stored, at the positions given by the
//                            forward mapping (Alg. 2), because the next WMMA needs it as a
//                            matrix_a fragment and WMMA has no register path from accumulator to
//                            matrix_a.
//
// Everything else is shared: one warp per block, 16 query rows per block, 16x16x16 WMMA (f16 in,
// f32 accumulate), Q (f16) and O (f32) kept in shared memory for the whole sweep, K and V
// fragments loaded straight from global memory, D (the head dimension) a compile-time constant:
// 64, 128 or 512 (the paper's size).
//
// The online softmax is the FA-1 form of Alg. 4: after key tile j, O holds the *normalized*
// output of the keys seen so far. With m, l the running row max and row sum (log2 domain, scores
// scaled by scale*log2(e) so that exp2 can be used):
//     m_new = max(m, rowmax(S))           l_new = l * 2^(m - m_new) + rowsum(2^(S - m_new))
//     P     = 2^(S - m_new) / l_new       alpha = l * 2^(m - m_new) / l_new
//     O     = alpha * O + P V
// The softmax path writes P (16x16 f16) and alpha (16 floats) to shared memory; the O update
// (scale the rows of O by alpha, then O += P V with WMMA, in shared memory) is the same code in
// all three kernels.
//
// Layout of Q, K, V, O: (B, H, N, D) contiguous f16, N a multiple of 16 (the wrapper checks).
// Launch: grid (N / 16, B * H), block 32, dynamic shared memory fa1_smem_bytes(D) (51904 bytes
// for D = 512: fraglab.launch raises the kernel's limit above the default 48 KB).
#include <mma.h>
#include <cuda_fp16.h>
#include "common.cuh"

using namespace nvcuda;

#define NEG_INF (-__int_as_float(0x7f800000))   // NVRTC has no <math.h> and so no INFINITY

// Unroll factor of the loops the three kernels share (the S product, the O update, loads and
// stores). The tests compile with -DFA1_UNROLL=1 to compare the kernels' SASS: unrolled loops
// come out with counts that vary from compile to compile by a few instructions.
#ifndef FA1_UNROLL
#define FA1_UNROLL 4
#endif

// Shared memory of one block. Leading dimensions are padded by 16 bytes so that the 16 rows a
// WMMA load or store touches do not all start in the same bank.
constexpr int FA1_LDS = 16 + 4;          // floats per row of sS (the baselines' copy of S)
constexpr int FA1_LDP = 16 + 8;          // halves per row of sP

template <int D> struct Fa1Smem {
    static constexpr int LDQ = D + 8;     // halves per row of sQ
    static constexpr int LDO = D + 4;     // floats per row of sO
    static constexpr int OFF_O = 0;                                  // float [16][LDO]
    static constexpr int OFF_Q = OFF_O + 16 * LDO * 4;               // half  [16][LDQ]
    static constexpr int OFF_S = OFF_Q + 16 * LDQ * 2;               // float [16][FA1_LDS]
    static constexpr int OFF_P = OFF_S + 16 * FA1_LDS * 4;           // half  [16][FA1_LDP]
    static constexpr int OFF_STATS = OFF_P + 16 * FA1_LDP * 2;       // float alpha[16], m[16], l[16]
    static constexpr int BYTES = OFF_STATS + 3 * 16 * 4;
    static_assert(OFF_Q % 32 == 0 && OFF_S % 32 == 0 && OFF_P % 32 == 0, "WMMA needs 32-byte alignment");
};

struct Fa1Tile {        // pointers into the block's shared memory
    float* o; __half* q; float* s; __half* p; float* alpha; float* m; float* l;
};

// ------------------------------------------------------------------------------------------------
// The three softmax paths. Each gets the accumulator fragment holding S = Q K^T of one 16x16 tile
// (unscaled) and must leave P in t.p and alpha in t.alpha, visible to the whole warp.
// ------------------------------------------------------------------------------------------------
using AccFrag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The paper's baseline: lanes 0-7, rows lane and lane + 8 one after the other, the exponential
// computed in pass 1 (row sum) and again in pass 2 (P), barriers between the passes.
struct SoftmaxPaperBaseline {
    __device__ void init(const Fa1Tile& t) {
        if (lane_id() < 16) { t.m[lane_id()] = NEG_INF; t.l[lane_id()] = 0.0f; }
        __syncthreads();
    }
    __device__ void step(const AccFrag& s, const Fa1Tile& t, float scale_log2) {
        const int lane = lane_id();
        wmma::store_matrix_sync(t.s, s, FA1_LDS, wmma::mem_row_major);
        __syncthreads();
        if (lane < 8) {
            for (int rr = 0; rr < 2; ++rr) {
                const int r = lane + 8 * rr;
                float mx = NEG_INF;
                for (int j = 0; j < 16; ++j) mx = fmaxf(mx, t.s[r * FA1_LDS + j] * scale_log2);
                const float m_old = t.m[r], m_new = fmaxf(m_old, mx);
                float sum = 0.0f;
                for (int j = 0; j < 16; ++j)                                   // exponential #1
                    sum += exp2f(t.s[r * FA1_LDS + j] * scale_log2 - m_new);
                const float l_old = t.l[r] * exp2f(m_old - m_new);
                const float l_new = l_old + sum;
                t.alpha[r] = l_old / l_new;
                t.m[r] = m_new;
                t.l[r] = l_new;
            }
        }
        __syncthreads();
        if (lane < 8) {
            for (int rr = 0; rr < 2; ++rr) {
                const int r = lane + 8 * rr;
                for (int j = 0; j < 16; ++j)                                   // exponential #2
                    t.p[r * FA1_LDP + j] = __float2half(
                        exp2f(t.s[r * FA1_LDS + j] * scale_log2 - t.m[r]) / t.l[r]);
            }
        }
        __syncthreads();
    }
};

// A fair shared-memory baseline: lane = 2 * row + half; each lane reads 8 scores of its row (two
// 16-byte loads), and the two lanes of a row combine their max and sum with one shuffle each.
// Each exponential is computed once; the row statistics stay in registers.
struct SoftmaxFairBaseline {
    float m = NEG_INF, l = 0.0f;      // of row lane / 2 (the same in both lanes of the row)
    __device__ void init(const Fa1Tile&) {}
    __device__ void step(const AccFrag& s, const Fa1Tile& t, float scale_log2) {
        const int lane = lane_id(), r = lane >> 1, h = lane & 1;
        wmma::store_matrix_sync(t.s, s, FA1_LDS, wmma::mem_row_major);
        __syncwarp();
        const float4* src = reinterpret_cast<const float4*>(t.s + r * FA1_LDS + 8 * h);
        const float4 a = src[0], b = src[1];
        float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float mx = NEG_INF;
#pragma unroll
        for (int j = 0; j < 8; ++j) mx = fmaxf(mx, x[j]);
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
        const float m_new = fmaxf(m, mx * scale_log2);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) { x[j] = exp2f(x[j] * scale_log2 - m_new); sum += x[j]; }
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        const float l_old = l * exp2f(m - m_new);
        const float l_new = l_old + sum, inv = 1.0f / l_new;
        __align__(16) __half2 p[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) p[j] = __floats2half2_rn(x[2 * j] * inv, x[2 * j + 1] * inv);
        *reinterpret_cast<uint4*>(t.p + r * FA1_LDP + 8 * h) = *reinterpret_cast<uint4*>(p);
        if (h == 0) t.alpha[r] = l_old * inv;
        m = m_new;
        l = l_new;
        __syncwarp();
    }
};

// Alg. 4 in registers. Accumulator layout (chapters 1-3; g = lane / 4, c = lane % 4):
//     x[0], x[1], x[4], x[5]: row g,     columns 2c, 2c+1, 2c+8, 2c+9
//     x[2], x[3], x[6], x[7]: row g + 8, the same columns
// The paper first swaps x[2,3] with x[4,5] (Fig. 2) so that each row sits in 4 consecutive
// registers; here the two register sets are named directly, which is the same thing after
// compilation (renaming registers costs no instruction). The four lanes of a quad hold a whole
// row, so two __shfl_xor_sync steps (1, 2) finish each reduction (Alg. 3); every lane of the quad
// ends with the row's value, so no broadcast is needed.
struct SoftmaxInRegister {
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};   // rows g and g + 8
    __device__ void init(const Fa1Tile&) {}
    __device__ void step(AccFrag& s, const Fa1Tile& t, float scale_log2) {
        const int lane = lane_id(), g = lane >> 2, c = lane & 3;
        float mx[2] = {fmaxf(fmaxf(s.x[0], s.x[1]), fmaxf(s.x[4], s.x[5])),
                       fmaxf(fmaxf(s.x[2], s.x[3]), fmaxf(s.x[6], s.x[7]))};
        float sum[2] = {0.0f, 0.0f}, m_new[2], inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 2));
            m_new[r] = fmaxf(m[r], mx[r] * scale_log2);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = (i >> 1) & 1;
            s.x[i] = exp2f(s.x[i] * scale_log2 - m_new[r]);
            sum[r] += s.x[i];
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            sum[r] += __shfl_xor_sync(FULL_MASK, sum[r], 1);
            sum[r] += __shfl_xor_sync(FULL_MASK, sum[r], 2);
            const float l_old = l[r] * exp2f(m[r] - m_new[r]);
            l[r] = l_old + sum[r];
            inv[r] = 1.0f / l[r];
            m[r] = m_new[r];
            if (c == 0) t.alpha[g + 8 * r] = l_old * inv[r];
        }
        // Alg. 2: register pair (i, i+1) holds columns (2c + 8*(i>>2), +1) of row g + 8*((i>>1)&1).
        __half2* p = reinterpret_cast<__half2*>(t.p);
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const int r = (i >> 1) & 1, row = g + 8 * r, col = 2 * c + 8 * (i >> 2);
            p[(row * FA1_LDP + col) / 2] = __floats2half2_rn(s.x[i] * inv[r], s.x[i + 1] * inv[r]);
        }
        __syncwarp();
    }
};

// ------------------------------------------------------------------------------------------------
// The kernel body, the same for all three.
// ------------------------------------------------------------------------------------------------
template <int D, class Softmax>
__device__ __forceinline__ void fa1(const __half* __restrict__ q, const __half* __restrict__ k,
                                    const __half* __restrict__ v, __half* __restrict__ o, int n,
                                    float scale_log2)
{
    using L = Fa1Smem<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    const Fa1Tile t{reinterpret_cast<float*>(smem + L::OFF_O), reinterpret_cast<__half*>(smem + L::OFF_Q),
                    reinterpret_cast<float*>(smem + L::OFF_S), reinterpret_cast<__half*>(smem + L::OFF_P),
                    reinterpret_cast<float*>(smem + L::OFF_STATS),
                    reinterpret_cast<float*>(smem + L::OFF_STATS) + 16,
                    reinterpret_cast<float*>(smem + L::OFF_STATS) + 32};
    const int lane = lane_id();
    const size_t head = (size_t)blockIdx.y * n * D;
    const int q0 = blockIdx.x * 16;
    q += head + (size_t)q0 * D;
    k += head;
    v += head;
    o += head + (size_t)q0 * D;

    // Q tile -> sQ (16-byte copies), O = 0. The loops shared by the three kernels carry explicit
    // unroll factors, so that the compiler unrolls them alike in all three and their SASS differs
    // only in the softmax path.
#pragma unroll FA1_UNROLL
    for (int i = lane; i < 16 * D / 8; i += 32) {
        const int r = i / (D / 8), c = (i % (D / 8)) * 8;
        *reinterpret_cast<uint4*>(t.q + r * L::LDQ + c) = *reinterpret_cast<const uint4*>(q + r * D + c);
    }
#pragma unroll FA1_UNROLL
    for (int i = lane; i < 16 * D / 4; i += 32) {
        const int r = i / (D / 4), c = (i % (D / 4)) * 4;
        *reinterpret_cast<float4*>(t.o + r * L::LDO + c) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    Softmax sm;
    sm.init(t);
    __syncwarp();

    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kt;   // K^T: K row-major
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
    AccFrag acc;
    for (int k0 = 0; k0 < n; k0 += 16) {
        // S = Q K^T for keys k0 .. k0 + 15.
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll FA1_UNROLL
        for (int kk = 0; kk < D / 16; ++kk) {
            wmma::load_matrix_sync(a, t.q + kk * 16, L::LDQ);
            wmma::load_matrix_sync(kt, k + (size_t)k0 * D + kk * 16, D);
            wmma::mma_sync(acc, a, kt, acc);
        }
        // The only difference between the three kernels.
        sm.step(acc, t, scale_log2);

        // O = alpha * O (rows of sO), then O += P V, one 16-column slice of O at a time.
#pragma unroll FA1_UNROLL
        for (int i = lane; i < 16 * D / 4; i += 32) {
            const int r = i / (D / 4), c = (i % (D / 4)) * 4;
            float4* p = reinterpret_cast<float4*>(t.o + r * L::LDO + c);
            const float al = t.alpha[r];
            float4 x = *p;
            x.x *= al; x.y *= al; x.z *= al; x.w *= al;
            *p = x;
        }
        __syncwarp();
        wmma::load_matrix_sync(a, t.p, FA1_LDP);
#pragma unroll FA1_UNROLL
        for (int dj = 0; dj < D / 16; ++dj) {
            wmma::load_matrix_sync(acc, t.o + dj * 16, L::LDO, wmma::mem_row_major);
            wmma::load_matrix_sync(vb, v + (size_t)k0 * D + dj * 16, D);
            wmma::mma_sync(acc, a, vb, acc);
            wmma::store_matrix_sync(t.o + dj * 16, acc, L::LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }

    // O (already normalized) -> f16 -> global, 8 elements per store.
#pragma unroll FA1_UNROLL
    for (int i = lane; i < 16 * D / 8; i += 32) {
        const int r = i / (D / 8), c = (i % (D / 8)) * 8;
        const float* src = t.o + r * L::LDO + c;
        __align__(16) __half2 h[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = __floats2half2_rn(src[2 * j], src[2 * j + 1]);
        *reinterpret_cast<uint4*>(o + r * D + c) = *reinterpret_cast<uint4*>(h);
    }
}

#define FA1_KERNEL(NAME, D, SOFTMAX)                                                               \
    extern "C" __global__ void __launch_bounds__(32)                                               \
    NAME##_d##D(const __half* q, const __half* k, const __half* v, __half* o, int n,               \
                float scale_log2)                                                                  \
    { fa1<D, SOFTMAX>(q, k, v, o, n, scale_log2); }
#define FA1_ALL(D)                                                                                 \
    FA1_KERNEL(fa1_paper_baseline, D, SoftmaxPaperBaseline)                                        \
    FA1_KERNEL(fa1_fair_baseline, D, SoftmaxFairBaseline)                                          \
    FA1_KERNEL(fa1_inregister, D, SoftmaxInRegister)

FA1_ALL(64)
FA1_ALL(128)
FA1_ALL(512)
