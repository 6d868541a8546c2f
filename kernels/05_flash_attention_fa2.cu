// 05_flash_attention (part 2 of 2): a FlashAttention-2 style kernel whose softmax never leaves
// the registers, and whose probabilities P go from the accumulator of S = Q K^T straight into
// the A operand of O += P V, without a trip through shared memory.
//
//   fa2_<f16|bf16>_d<64|128>_w<4|8>(q, k, v, o, n, scale_log2, causal)
//
// Layout: q, k, v, o are (B, H, N, D) contiguous, f16 or bf16 (bf16 as raw 16-bit patterns);
// any N >= 1 (the last key tile and the last query tile are masked). Launch: grid
// (ceil(N / BM), B * H), block 32 * W threads, dynamic shared memory fa2_smem_bytes (below).
// sm_80 and newer: on older targets the kernels exist but trap (the wrapper refuses them).
//
// The FA-2 loop order (Dao 2023; the Triton tutorial kernel quoted in the Intel blog on FA-2):
// a block owns BM = 16 * W query rows and sweeps all key/value tiles of BN = 64 keys; each warp
// owns 16 of the rows. Per key tile j:
//     S  = Q K_j^T                   (Q fragments stay in registers for the whole sweep)
//     m' = max(m, rowmax(S)),  P = 2^(S - m'),  l = l * 2^(m - m') + rowsum(P)
//     O  = O * 2^(m - m') + P V_j    (O stays in registers, f32; normalized once at the end)
// Causal attention uses the two-loop structure: first the key tiles that no query row of the
// block can see past (no mask code at all), then the diagonal tiles, masked. The same second
// loop masks the ragged last tile when N is not a multiple of BN.
//
// Tensor cores through raw PTX: mma.sync.aligned.m16n8k16 (f32 accumulate) with operands loaded
// by ldmatrix from shared memory. Fragment layouts (PTX ISA, "Matrix fragments for
// mma.m16n8k16"; g = lane / 4, c = lane % 4; each register holds two 16-bit values, the lower
// column in the low half):
//     A (16x16):  a0 = (row g,   cols 2c, 2c+1)   a1 = (row g+8, cols 2c, 2c+1)
//                 a2 = (row g,   cols 2c+8, +9)   a3 = (row g+8, cols 2c+8, +9)
//     B (16x8):   b0 = (rows 2c, 2c+1, col g)     b1 = (rows 2c+8, 2c+9, col g)
//     C (16x8):   c0, c1 = (row g, cols 2c, 2c+1) c2, c3 = (row g+8, cols 2c, 2c+1)
// Why P can be reused in registers: S for 16 keys is two 16x8 accumulators, keys 0-7 (C0) and
// keys 8-15 (C1). Lane (g, c) holds in C0 rows g and g+8 at keys 2c, 2c+1 and in C1 the same at
// keys 2c+8, 2c+9: exactly the elements a0..a3 of the A fragment of P (16 rows x 16 keys), in the
// order a0 = (C0.c0, C0.c1), a1 = (C0.c2, C0.c3), a2 = (C1.c0, C1.c1), a3 = (C1.c2, C1.c3). So P
// is only converted to f16/bf16 and packed in pairs; no value moves between lanes. (With WMMA
// this reuse is not allowed: an accumulator fragment cannot be passed as a matrix_a fragment and
// the element order of matrix_a fragments is not documented, so the FA-1 kernels in
// 05_flash_attention_fa1.cu store P to shared memory. That is why this kernel uses PTX.)
// fraglab.flash_attention.emulate_fa2 checks this correspondence, and every ldmatrix address
// below, in the warp emulator.
//
// Shared memory: Q (BM x D), K (BN x D), V (BN x D), 16-bit values, row-major, each row cut into
// 16-byte chunks whose position is XOR-swizzled with the row (chunk c of row r is stored at
// chunk c ^ (r % 8)): the 8 rows an ldmatrix 8x8 matrix reads then fall in 8 different bank
// groups, and so do the cp.async writes, without padding. Loads are cp.async (16 bytes each,
// zero-filled past row N). The next K tile is fetched while P V runs, and V_j while S and the
// softmax run (the FA-2 pipeline with one buffer per operand).
#include "fa2_mma.cuh"     // the PTX helpers, the swizzle and the per-tile steps shared with chapter 08

using namespace fa2mma;

constexpr int FA2_BN = 64;            // keys per K/V tile

template <int D, int W> struct Fa2Config {
    static constexpr int BM = 16 * W;               // query rows per block, 16 per warp
    static constexpr int THREADS = 32 * W;
    static constexpr int CPR = D / 8;               // 16-byte chunks per row
    static constexpr int ROW_BYTES = D * 2;
    static constexpr int OFF_Q = 0;
    static constexpr int OFF_K = OFF_Q + BM * ROW_BYTES;
    static constexpr int OFF_V = OFF_K + FA2_BN * ROW_BYTES;
    static constexpr int SMEM_BYTES = OFF_V + FA2_BN * ROW_BYTES;
    static_assert(D == 64 || D == 128, "head dimension 64 or 128");
    static_assert((BM * CPR) % THREADS == 0 && (FA2_BN * CPR) % THREADS == 0, "whole tiles per thread");
};

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

// ROWS x D tile, global rows r0 .. r0 + ROWS - 1 (zeros past row n), into swizzled shared memory.
// Thread i copies chunks i, i + THREADS, ...: consecutive threads read consecutive 16-byte chunks.
template <int D, int W, int ROWS>
__device__ __forceinline__ void load_tile(u32 dst, const u16* __restrict__ src, int r0, int n)
{
    using C = Fa2Config<D, W>;
#pragma unroll
    for (int it = 0; it < ROWS * C::CPR / C::THREADS; ++it) {
        const int i = threadIdx.x + it * C::THREADS, r = i / C::CPR, c = i % C::CPR;
        const bool ok = r0 + r < n;
        cp_async16(dst + swz<D>(r, c), src + (size_t)(ok ? r0 + r : 0) * D + c * 8, ok);
    }
}

// Per-warp state that lives in registers for the whole sweep.
template <int D> struct Fa2Regs {
    u32 q[D / 16][4];     // A fragments of this warp's 16 query rows, one per 16 columns
    float o[D / 8][4];         // O: D/8 accumulators of 16 rows x 8 columns
    float m[2], l[2];          // rows g and g + 8: running max (log2 domain), partial row sum
};

// One key tile: S = Q K^T, mask (MASK only), online softmax, O += P V.
template <int D, int W, bool BF16, bool MASK>
__device__ __forceinline__ void fa2_tile(Fa2Regs<D>& R, int j, int n_tiles, u32 sK, u32 sV,
                                         const u16* __restrict__ k, const u16* __restrict__ v,
                                         int n, float scale_log2, bool causal, int row0)
{
    const int lane = lane_id(), c4 = lane & 3;
    const int k0 = j * FA2_BN;
    load_tile<D, W, FA2_BN>(sV, v, k0, n);          // V_j arrives while S and the softmax run
    cp_async_commit();

    // S = Q K^T: 16 rows x 64 keys = 8 accumulators of 16 x 8 (fa2_mma.cuh: qk_block); then the
    // mask, keys past n and (causal) keys after the query row get -inf (MASK only).
    float s[FA2_BN / 8][4];
#pragma unroll
    for (int t = 0; t < FA2_BN / 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) qk_block<D, FA2_BN, BF16>(s, R.q[kk], sK, kk, lane);
    if (MASK) mask_tile<FA2_BN>(s, k0, n, causal, row0, c4);

    // Online softmax on the accumulators (fa2_mma.cuh: online_softmax): registers 0, 1 of each
    // accumulator are row g, registers 2, 3 row g + 8, and a quad of lanes holds a whole row.
    float mx[2], m_use[2];
    online_softmax<D, FA2_BN>(s, R.o, R.m, R.l, scale_log2, mx, m_use);

    cp_async_wait_all();     // this thread's part of V_j has landed ...
    __syncthreads();         // ... everyone's has, and every warp is done reading K_j
    if (j + 1 < n_tiles) load_tile<D, W, FA2_BN>(sK, k, k0 + FA2_BN, n);   // K_{j+1} during P V
    cp_async_commit();

    // O += P V, A = P straight from the accumulators (see the top of the file; fa2_mma.cuh: pv_block).
    u32 p[4], b[4];
    pv_block<D, FA2_BN, BF16>(R.o, s, sV, lane, p, b);
    cp_async_wait_all();     // K_{j+1} has landed (every thread's part, after the barrier) ...
    __syncthreads();         // ... and every warp is done reading V_j
}

template <int D, int W, bool BF16>
__device__ __forceinline__ void fa2(const u16* __restrict__ q, const u16* __restrict__ k,
                                    const u16* __restrict__ v, u16* __restrict__ o, int n,
                                    float scale_log2, int causal)
{
    using C = Fa2Config<D, W>;
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 base = (u32)__cvta_generic_to_shared(smem);
    const u32 sQ = base + C::OFF_Q, sK = base + C::OFF_K, sV = base + C::OFF_V;
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    // Causal blocks differ in work (the last query rows see every key): start the big ones first.
    const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = qb * C::BM;
    const size_t head = (size_t)blockIdx.y * n * D;
    q += head; k += head; v += head; o += head;

    // Key tiles [0, n_full) need no mask; [n_full, n_tiles) are masked (causal diagonal, ragged end).
    const int last_key = causal ? min(q0 + C::BM, n) : n;          // keys >= last_key: never seen
    const int n_tiles = (last_key + FA2_BN - 1) / FA2_BN;
    const int n_full = min(causal ? (q0 + 1) / FA2_BN : n_tiles, n / FA2_BN);

    load_tile<D, W, C::BM>(sQ, q, q0, n);
    load_tile<D, W, FA2_BN>(sK, k, 0, n);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    Fa2Regs<D> R;
    // A fragments of Q: matrix 0 = rows 0-7 / cols 0-7, 1 = rows 8-15 / cols 0-7, 2 = rows 0-7 /
    // cols 8-15, 3 = rows 8-15 / cols 8-15 (= a0, a1, a2, a3).
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        ldsm4<false>(R.q[kk], sQ + swz<D>(16 * warp + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
    for (int t = 0; t < D / 8; ++t) R.o[t][0] = R.o[t][1] = R.o[t][2] = R.o[t][3] = 0.0f;
    R.m[0] = R.m[1] = FA2MMA_NEG_INF;
    R.l[0] = R.l[1] = 0.0f;

    const int row0 = q0 + 16 * warp + g;         // query index of this lane's row g (and +8)
    int j = 0;
    for (; j < n_full; ++j)
        fa2_tile<D, W, BF16, false>(R, j, n_tiles, sK, sV, k, v, n, scale_log2, causal, row0);
    for (; j < n_tiles; ++j)
        fa2_tile<D, W, BF16, true>(R, j, n_tiles, sK, sV, k, v, n, scale_log2, causal, row0);

    // Epilogue: finish the row sums, normalize, and write O through this warp's own rows of sQ
    // (no other warp reads them after the Q fragments were loaded), so that the global stores
    // are whole 16-byte chunks of rows. A row that saw no key (only rows past n) gets 0, not NaN.
    float inv[2];
    row_inverses(R.l, inv);
    store_o<D, BF16>(o, R.o, inv, sQ, q0, n, lane, warp, g, c4);
}

#endif  // FRAGLAB_SM80

#define FA2_KERNEL(TYPE, D, W, BF16, MINB)                                                         \
    extern "C" __global__ void __launch_bounds__(32 * W, MINB)                                     \
    fa2_##TYPE##_d##D##_w##W(const u16* q, const u16* k, const u16* v, u16* o, \
                             int n, float scale_log2, int causal)                                  \
    { SM80_ONLY(fa2<D, W, BF16>(q, k, v, o, n, scale_log2, causal)); }

FA2_KERNEL(f16, 64, 4, false, 2)
FA2_KERNEL(f16, 128, 4, false, 2)
FA2_KERNEL(bf16, 64, 4, true, 2)
FA2_KERNEL(bf16, 128, 4, true, 2)
FA2_KERNEL(f16, 64, 8, false, 1)
FA2_KERNEL(f16, 128, 8, false, 1)
FA2_KERNEL(bf16, 64, 8, true, 1)
FA2_KERNEL(bf16, 128, 8, true, 1)
