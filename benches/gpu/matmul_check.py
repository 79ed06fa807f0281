"""Checks the generated tutorial matmul on ragged sizes and transposed operands.

Run on the NVIDIA machine from the repository root, on kernels printed without the
integer-argument specialisation (its facts hold only for the arguments it was printed for):

    cargo run --release --example emit_gpu_bench -- DIR --no-int-spec   # on a machine with Rust
    python3 benches/gpu/matmul_check.py DIR

The `matmul_4096` kernel (128x128x64 tiles, 8 warps) is launched with other sizes and
strides; each result (f16, output poisoned with NaN) is compared with PyTorch's product in
f32 within two f16 ulps of the largest output.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench  # noqa: E402

CASES = [(1000, 777, 1029, False, False), (333, 271, 190, False, False),
         (17, 300, 33, False, False), (256, 256, 256, False, False),
         (300, 200, 130, True, False), (200, 300, 70, False, True),
         (129, 129, 65, True, True), (4096, 4096, 4096, False, False)]


def main():
    gen = bench.Generated(sys.argv[1])
    spec = gen.kernels["matmul_4096"]
    consts = dict(spec["constexprs"])
    bm, bn = consts["BLOCK_SIZE_M"], consts["BLOCK_SIZE_N"]
    torch.manual_seed(1)
    fails = 0
    for m, n, k, ta, tb in CASES:
        def rand(r, c, t):
            x = torch.randn(c, r, device="cuda", dtype=torch.float16)
            return x.t() if t else x.t().contiguous()
        a, b = rand(m, k, ta), rand(k, n, tb)
        a[0, 0], a[-1, -1] = 0.0, -0.0
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        vals = dict(M=m, N=n, K=k, stride_am=a.stride(0), stride_ak=a.stride(1),
                    stride_bk=b.stride(0), stride_bn=b.stride(1), stride_cm=c.stride(0),
                    stride_cn=c.stride(1))
        case = dict(spec)
        case["params"] = [dict(p, value=vals[p["name"]]) if p["role"] == "scalar" else p
                          for p in spec["params"]]
        case["grid"] = [((m + bm - 1) // bm) * ((n + bn - 1) // bn), 1, 1]
        gen.kernels["check"] = case
        gen.modules.pop("check", None)
        gen.launcher("check", {"a_ptr": a, "b_ptr": b, "c_ptr": c})()
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        err = (c.float() - ref).abs().max().item()
        tol = 2 * bench.f16_ulp(ref)
        ok = err <= tol
        fails += not ok
        print(f"{m}x{n}x{k} A{'ᵀ' if ta else ''} B{'ᵀ' if tb else ''}: max error {err:.3g} "
              f"(tolerance {tol:.3g}) {'ok' if ok else 'FAIL'}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
