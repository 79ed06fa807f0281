"""A hand-written `wgmma` matmul (benches/gpu/wgmma_probe.cu) against Triton's tutorial
kernel, on the NVIDIA machine from the repository root:

    python3 benches/gpu/wgmma_probe.py

The probe is the tutorial's algorithm at 128x128x64 on 8 warps (two warpgroups of
`m64n128k16`), A and B copied with `cp.async` into a ring of S buffers in the 128-byte
swizzle, for 4096^3 f16 with unit strides and no masks: what the printed kernel would reach
with no address or mask work per K step. Entries `mm_sS_wW_bB`: S buffers; W = 1 keeps one
warpgroup MMA in flight (copies issued S - 2 steps ahead) where W = 0 waits for it; B = 1
swaps the leading and stride byte offsets of B's descriptor (a wrong layout, kept to show
that the check fails when the descriptors are wrong). Each result is checked against
PyTorch in f32 (max error printed).
"""
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench, triton_ref
import cupy
here = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(here, "wgmma_probe.cu")).read()
nvcc = "/usr/local/cuda/bin/nvcc"
print("nvcc exists", os.path.exists(nvcc), "cupy", cupy.__version__)
mod = None
try:
    mod = cupy.RawModule(code=src, options=("-std=c++17", "-arch=sm_90a"))
    mod.get_function("mm_s4_w0_b0")
    print("cupy RawModule with -arch=sm_90a ok")
except Exception as e:
    print("cupy -arch fail:", str(e)[:500])
    mod = None
if mod is None:
    subprocess.check_call([nvcc, "-cubin", "-arch=sm_90a", "-O3", "-std=c++17", "-o", "/tmp/wgmma_probe.cubin", os.path.join(here, "wgmma_probe.cu")])
    mod = cupy.RawModule(path="/tmp/wgmma_probe.cubin")
    print("nvcc cubin ok")
torch.manual_seed(0)
for n in (4096,):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    ref = (a.float() @ b.float())
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    ct = torch.empty(n, n, device="cuda", dtype=torch.float16)
    fl = 2 * n ** 3
    ints = [torch.tensor([v], dtype=torch.int32, device="cuda") for v in (n, n, n, n, 1, n, 1, n, 1)]
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    for rnd in range(2):
        t = bench.time_ms(lambda: triton_ref.matmul(a, b, ct), reps=50)
        line = [f"{n} triton {fl/t/1e9:.1f}"]
        for name in ("mm_s4_w0_b0", "mm_s4_w0_b1", "mm_s4_w1_b0", "mm_s4_w1_b1", "mm_s3_w0_b0", "mm_s3_w0_b1", "mm_s5_w1_b0", "mm_s5_w1_b1"):
            fn = mod.get_function(name)
            S = int(name[4])
            smem = S * 32768 + 1024
            fn.max_dynamic_shared_size_bytes = smem
            args = (cupy.uint64(a.data_ptr()), cupy.uint64(b.data_ptr())) + tuple(cupy.uint64(x.data_ptr()) for x in ints) + (cupy.uint64(c.data_ptr()),)
            def run():
                with stream:
                    fn(((n // 128) ** 2,), (256,), args, shared_mem=smem)
            c.fill_(float("nan"))
            run(); torch.cuda.synchronize()
            err = (c.float() - ref).abs().max().item()
            ms = bench.time_ms(run, reps=50)
            line.append(f"{name} {fl/ms/1e9:.1f} err {err:.2e}")
        print(" | ".join(line), flush=True)
