// 05_flash_attention, lab 05: the tail that fraglab.flash_attention.fa1_lab_source appends to
// 05_flash_attention_fa1.cu (with its FA1_ALL lines removed) after the learner's softmax step.
// Not a header to include on its own: it uses the kernel file's Fa1Tile, AccFrag, FA1_LDP and
// NEG_INF, and the step
//     __device__ __forceinline__ void online_softmax_step(float (&x)[8], float (&m)[2],
//                                                         float (&l)[2], float (&alpha)[2],
//                                                         float scale_log2);
// that the learner writes. fa1_lab_source then adds one FA1_KERNEL(fa1_lab, D, SoftmaxLab) line
// per head dimension.
//
// SoftmaxLab is SoftmaxInRegister's data movement around a softmax step supplied from outside:
// copy the 8 accumulator registers of S out, let the step turn them into P (normalized) and the
// running statistics, then store alpha (one lane per row) and P to shared memory at the
// positions the accumulator layout gives (register pair (i, i+1): row g + 8 ((i >> 1) & 1),
// columns 2c + 8 (i >> 2), +1; g = lane / 4, c = lane % 4).
struct SoftmaxLab {
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};   // rows g and g + 8
    __device__ void init(const Fa1Tile&) {}
    __device__ void step(AccFrag& s, const Fa1Tile& t, float scale_log2) {
        const int lane = lane_id(), g = lane >> 2, c = lane & 3;
        float x[8], alpha[2];
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] = s.x[i];
        online_softmax_step(x, m, l, alpha, scale_log2);
        if (c == 0) { t.alpha[g] = alpha[0]; t.alpha[g + 8] = alpha[1]; }
        __half2* p = reinterpret_cast<__half2*>(t.p);
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const int row = g + 8 * ((i >> 1) & 1), col = 2 * c + 8 * (i >> 2);
            p[(row * FA1_LDP + col) / 2] = __floats2half2_rn(x[i], x[i + 1]);
        }
        __syncwarp();
    }
};
