"""Proof that compute-sanitizer sees kernels launched through fraglab's path (a check that can
fail): run under a tool with the name of a planted bug; the tool must report it.

    compute-sanitizer --tool memcheck  python3 .ci/sanitizer_selftest.py oob    # must report
    compute-sanitizer --tool racecheck python3 .ci/sanitizer_selftest.py race   # must report
"""
import sys

import cupy as cp
import numpy as np

from fraglab import launch

SOURCE = r'''
extern "C" __global__ void oob(float* p, int n) { p[threadIdx.x + n] = 1.0f; }  // writes past n
extern "C" __global__ void race(float* out) {
    __shared__ float s[32];
    s[threadIdx.x % 32] = threadIdx.x;          // 64 threads, 32 slots: two writers per slot
    out[threadIdx.x] = s[(threadIdx.x + 1) % 32];  // and no barrier before the read
}
'''

cp.cuda.set_allocator(None)  # each array its own allocation, so memcheck knows where it ends
bug = sys.argv[1]
fn = launch.get_kernel("sanitizer_selftest.cu", bug, source=SOURCE)
if bug == "oob":
    buf = cp.zeros(32, cp.float32)
    launch.launch(fn, 1, 32, (buf, np.int32(32)), sync=False)
else:
    launch.launch(fn, 1, 64, (cp.zeros(64, cp.float32),), sync=False)
cp.cuda.runtime.deviceSynchronize()
print("kernel ran")
