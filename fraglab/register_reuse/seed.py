"""The seed article's figures, to place beside ours (never typed into prose by hand).

The seed calls its GPU an "H100", but its cuBLAS figure (23,250 GFLOP/s FP32) and siboehm's
ladder it follows are A6000 numbers; ours are measured on an H100 SXM (``bench``).
"""

SEED = {
    "citation": ("'Kernel 4: 1D block-tiling 36.5%' (SGEMM tutorial article after Simon Boehm, "
                 "'How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance', kernel 4); "
                 "shared/seeds/002_cfc15a0507218682.txt"),
    "gpu_as_stated": "H100 (figures match siboehm's A6000 runs)",
    "of_cublas": {"smem": 0.128, "tile1d": 0.365, "tile2d": 0.687},   # kernels 3, 4, 5
    "gflops": {"smem": 2980, "tile1d": 8474, "cublas": 23250},
    "speedup_tile1d_over_smem": 2.8,
    "napkin_loads_per_fma": {"smem": "2", "tile1d": "9/8"},
    "tiles_tile1d": {"BM": 64, "BN": 64, "BK": 8, "TM": 8},
    "registers_tile1d": 37,
    "stall_smem": "Stall MIO Throttle dominates (kernel 3); it collapses in kernel 4",
}
