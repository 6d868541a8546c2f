// 01_tracer: where does each element of a WMMA fragment live? Ask the hardware.
//
// WMMA documents what a fragment holds (num_elements values per lane) but not which matrix
// element sits in which lane and register. A *tracer* finds out: fill a matrix with values that
// encode their own coordinates, push it into a fragment, and let every lane write out its
// registers. The host decodes the values back into (row, col) for each (lane, register).
//
// Two ways into a fragment, side by side:
//
//   trace_mma_<kind>   the paper's Algorithm 1 (Morales, section 3.1): the tracer goes in as
//                      matrix_a and is multiplied by an identity, so the *accumulator* of
//                      mma_sync holds the tracer. Accumulator kinds only.
//   trace_load_<kind>  load_matrix_sync of the tracer straight into the fragment: works for
//                      accumulators and for matrix_a / matrix_b fragments alike.
//
// The tracer arrives as a row-major float matrix (rows x cols of the fragment's tile); the
// kernel converts it to the fragment's element type *on the device* (__float2half_rn,
// __float2bfloat16_rn, ...). That conversion is where an encoding that is too large for the
// type silently rounds: the host chooses the encoding and checks it (fraglab/tracer/encoding.py).
//
// Every kernel runs as ONE warp (blockDim.x = 32, one block) and writes out[lane * NE + i] =
// fragment.x[i] as float, NE = the fragment's num_elements.
#include "fragment_kinds.cuh"      // the kinds (X-macro lists), padded_ld, round_to_input_type

using namespace nvcuda;

// ---- element conversions -------------------------------------------------------------------
// Memory type of the tile that load_matrix_sync reads, from a float tracer value.
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_float<double>(float v) { return (double)v; }
template <> __device__ __forceinline__ int from_float<int>(float v) { return __float2int_rn(v); }
// The host checks that integer tracers fit the type: a float outside the range of signed char
// or unsigned char has no defined conversion.
template <> __device__ __forceinline__ signed char from_float<signed char>(float v)
{ return (signed char)__float2int_rn(v); }
template <> __device__ __forceinline__ unsigned char from_float<unsigned char>(float v)
{ return (unsigned char)__float2uint_rn(v); }
#if FRAGLAB_SM80
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{ return __float2bfloat16_rn(v); }
#endif

// A fragment element (its storage type) back to float for the dump.
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(double v) { return (float)v; }
__device__ __forceinline__ float to_float(int v) { return (float)v; }
__device__ __forceinline__ float to_float(signed char v) { return (float)v; }
__device__ __forceinline__ float to_float(unsigned char v) { return (float)v; }
#if FRAGLAB_SM80
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

template <typename F>
__device__ __forceinline__ void dump(const F& f, float* out)
{
    const int lane = lane_id();
#pragma unroll
    for (int i = 0; i < F::num_elements; ++i)
        out[lane * F::num_elements + i] = to_float(f.x[i]);
}

// ---- way (b): load the tracer straight into the fragment ------------------------------------
// Use = matrix_a (tile M x K) or matrix_b (tile K x N). The tile is written to shared memory in
// the fragment's own memory order (row- or col-major), then loaded.
template <typename Use, int M, int N, int K, typename FragT, typename MemT, typename Layout, int NE>
__device__ void trace_input_load(const float* tracer, float* out)
{
    constexpr bool is_a = same_type<Use, wmma::matrix_a>::value;
    constexpr bool row_major = same_type<Layout, wmma::row_major>::value;
    constexpr int R = is_a ? M : K, C = is_a ? K : N;          // the tile this fragment holds
    constexpr int LD = padded_ld<MemT>(row_major ? C : R);
    __shared__ __align__(128) MemT tile[(row_major ? R : C) * LD];
    for (int e = lane_id(); e < R * C; e += 32) {
        const int r = e / C, c = e % C;
        tile[row_major ? r * LD + c : c * LD + r] = from_float<MemT>(tracer[e]);
    }
    __syncwarp();
    wmma::fragment<Use, M, N, K, FragT, Layout> f;
    check_kind<decltype(f), NE>();
    wmma::load_matrix_sync(f, tile, LD);
    dump(f, out);
}

// Accumulators: load_matrix_sync from a row-major M x N tile of the accumulator's type.
template <int M, int N, int K, typename AccT, int NE>
__device__ void trace_acc_load(const float* tracer, float* out)
{
    constexpr int LD = padded_ld<AccT>(N);
    __shared__ __align__(128) AccT tile[M * LD];
    for (int e = lane_id(); e < M * N; e += 32)
        tile[(e / N) * LD + e % N] = from_float<AccT>(tracer[e]);
    __syncwarp();
    wmma::fragment<wmma::accumulator, M, N, K, AccT> acc;
    check_kind<decltype(acc), NE>();
    wmma::load_matrix_sync(acc, tile, LD, wmma::mem_row_major);
    dump(acc, out);
}

// ---- way (a): Algorithm 1, tracer x identity through mma_sync -------------------------------
// C = T * I_N, computed in k-steps of K columns: step s multiplies the columns s*K .. s*K+K-1 of
// T (zero past column N-1) by rows s*K .. s*K+K-1 of the N x N identity. For 16x16x16 that is
// the paper's single mma_sync; 8x32x16, 16x16x8 (tf32) and 8x8x4 (f64) need two steps, and
// 32x8x16 one step with T padded by zero columns. InFrag is the input fragments' element type
// (precision::tf32 for tf32), InMem their memory type.
template <int M, int N, int K, typename AccT, typename InFrag, typename InMem, int NE>
__device__ void trace_acc_mma(const float* tracer, float* out)
{
    constexpr int LDA = padded_ld<InMem>(K), LDB = padded_ld<InMem>(N);
    __shared__ __align__(128) InMem a[M * LDA];
    __shared__ __align__(128) InMem b[K * LDB];
    wmma::fragment<wmma::accumulator, M, N, K, AccT> acc;
    check_kind<decltype(acc), NE>();
    wmma::fill_fragment(acc, (AccT)0);
    for (int s = 0; s * K < N; ++s) {
        for (int e = lane_id(); e < M * K; e += 32) {               // A_s = T[:, sK : sK+K]
            const int i = e / K, p = e % K, j = s * K + p;
            a[i * LDA + p] = from_float<InMem>(j < N ? tracer[i * N + j] : 0.0f);
        }
        for (int e = lane_id(); e < K * N; e += 32) {               // B_s = I[sK : sK+K, :]
            const int p = e / N, j = e % N;
            b[p * LDB + j] = from_float<InMem>(s * K + p == j ? 1.0f : 0.0f);
        }
        __syncwarp();
        wmma::fragment<wmma::matrix_a, M, N, K, InFrag, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, M, N, K, InFrag, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, a, LDA);
        wmma::load_matrix_sync(fb, b, LDB);
        round_to_input_type(fa);
        round_to_input_type(fb);
        wmma::mma_sync(acc, fa, fb, acc);
        __syncwarp();                                               // before the next step's writes
    }
    dump(acc, out);
}

// ---- the kinds -------------------------------------------------------------------------------
// One extern "C" entry point per kind and way, made from the lists of fragment_kinds.cuh; the
// names are the kind names of fraglab.fragments.KINDS.
#define TRACE_LOAD_ACC(GUARD, NAME, M, N, K, T, NE, IN) \
    extern "C" __global__ void trace_load_##NAME(const float* tracer, float* out) \
    { GUARD(trace_acc_load<M, N, K, FRAGLAB_FRAG_T(T), NE>(tracer, out)); }
#define TRACE_LOAD_INPUT(GUARD, NAME, USE, M, N, K, T, LAYOUT, NE) \
    extern "C" __global__ void trace_load_##NAME(const float* tracer, float* out) \
    { GUARD(trace_input_load<wmma::USE, M, N, K, FRAGLAB_FRAG_T(T), FRAGLAB_MEM_T(T), \
                             wmma::LAYOUT##_major, NE>(tracer, out)); }
// Way (a) multiplies through the input type IN: the kind's default (trace_mma_<kind>) and the
// extra inputs (trace_mma_<kind>_<IN>in, e.g. bf16, where row*100 + col is not exact).
#define TRACE_MMA_BODY(GUARD, M, N, K, T, NE, IN) \
    (const float* tracer, float* out) \
    { GUARD(trace_acc_mma<M, N, K, FRAGLAB_FRAG_T(T), FRAGLAB_FRAG_T(IN), FRAGLAB_MEM_T(IN), \
                          NE>(tracer, out)); }
#define TRACE_MMA(GUARD, NAME, M, N, K, T, NE, IN) \
    extern "C" __global__ void trace_mma_##NAME TRACE_MMA_BODY(GUARD, M, N, K, T, NE, IN)
#define TRACE_MMA_EXTRA(GUARD, NAME, M, N, K, T, NE, IN) \
    extern "C" __global__ void trace_mma_##NAME##_##IN##in TRACE_MMA_BODY(GUARD, M, N, K, T, NE, IN)

FRAGLAB_ACCUMULATOR_KINDS(TRACE_LOAD_ACC)
FRAGLAB_ACCUMULATOR_KINDS(TRACE_MMA)
FRAGLAB_EXTRA_MMA_INPUTS(TRACE_MMA_EXTRA)
FRAGLAB_INPUT_KINDS(TRACE_LOAD_INPUT)
