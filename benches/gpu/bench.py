"""GPU benchmark: triton-metal's generated CUDA next to Triton, same algorithms, same GPU.

Run on the NVIDIA machine from the repository root:

    python3 benches/gpu/bench.py benches/gpu/generated

`generated/` holds the CUDA that triton-metal printed for each case plus manifest.json
(written here, on a machine with Rust, by `cargo run --release --example emit_gpu_bench`).
The sources are compiled with NVRTC through CuPy and launched on PyTorch's stream;
everything is timed with CUDA events (median of repeated runs after warm-up) and checked
against PyTorch.
"""
import json
import os
import sys

import torch

import triton_ref

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int32": torch.int32, "int64": torch.int64, "uint32": torch.int32, "bool": torch.bool}


def time_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def f16_ulp(ref):
    """One f16 ulp at the largest magnitude of `ref`: f32-accumulated results rounded to f16
    by different summation orders may differ by one ulp of the output (cuBLAS, Triton and
    triton-metal all accumulate in f32, in different orders)."""
    import math
    m = ref.float().abs().max().item()
    return 2.0 ** (math.floor(math.log2(m)) - 10) if m > 0 else 0.0


def copy_bandwidth():
    n = 1 << 28
    a = torch.empty(n, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    ms = time_ms(lambda: b.copy_(a))
    return 2 * n * 4 / ms / 1e6


class Generated:
    """triton-metal's kernels, compiled with NVRTC (CuPy) from the printed CUDA."""

    def __init__(self, folder):
        import cupy
        self.cupy = cupy
        self.folder = folder
        with open(os.path.join(folder, "manifest.json")) as f:
            self.kernels = {k["case"]: k for k in json.load(f)["kernels"]}
        self.modules = {}

    def has(self, case):
        return case in self.kernels

    def launcher(self, case, tensors):
        spec = self.kernels[case]
        if case not in self.modules:
            with open(os.path.join(self.folder, spec["file"])) as f:
                src = f.read()
            options = ("-std=c++17", "--use_fast_math") if spec.get("fast_math") else ("-std=c++17",)
            if spec.get("arch", "sm_90") != "sm_90":
                # wgmma needs the architecture-specific sm_90a (MLX compiles for it too).
                options += ("-arch=" + spec["arch"],)
            mod = self.cupy.RawModule(code=src, options=options, name_expressions=None)
            self.modules[case] = mod.get_function(spec["entry"])
        fn = self.modules[case]
        args = []
        keep = []
        for p in spec["params"]:
            if p["role"] == "scalar":
                t = torch.tensor([p["value"]], dtype=DTYPES[p["dtype"]], device="cuda")
                keep.append(t)
                args.append(self.cupy.uint64(t.data_ptr()))
            else:
                args.append(self.cupy.uint64(tensors[p["name"]].data_ptr()))
        grid, block, smem = tuple(spec["grid"]), tuple(spec["block"]), spec.get("shared_mem", 0)
        if smem > 48000:
            # MLX's cuda_kernel raises the function's dynamic shared-memory limit for
            # requests above 48,000 bytes; the generator pads requests to pass it.
            fn.max_dynamic_shared_size_bytes = smem
        stream = self.cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

        def run():
            with stream:
                fn(grid, block, tuple(args), shared_mem=smem)
        run.keep = keep
        return run


def cases():
    torch.manual_seed(0)
    dev = "cuda"
    out = []

    n = 1 << 28
    x, y = torch.rand(n, device=dev), torch.rand(n, device=dev)
    o1, o2 = torch.empty_like(x), torch.empty_like(x)
    out.append(dict(case="vector_add", what="vector add 2^28 f32", bytes=3 * n * 4,
                    triton=lambda: triton_ref.add(x, y, o1), ref=lambda: x + y,
                    tensors={"x_ptr": x, "y_ptr": y, "output_ptr": o2}, t_out=o1, g_out="output_ptr",
                    tol=0))

    r = c = 16384
    m = torch.randn(r, c, device=dev)
    s1, s2 = torch.empty(r, device=dev), torch.empty(r, device=dev)
    out.append(dict(case="row_sum", what="row-sum 16384x16384 f32", bytes=r * c * 4 + r * 4,
                    triton=lambda: triton_ref.row_sum(m, s1), ref=lambda: m.sum(1),
                    tensors={"x_ptr": m, "out_ptr": s2}, t_out=s1, g_out="out_ptr", tol=1e-2))

    sr, sc = 32768, 4096
    sx = torch.randn(sr, sc, device=dev)
    so1, so2 = torch.empty_like(sx), torch.empty_like(sx)
    out.append(dict(case="softmax", what="softmax 32768x4096 f32", bytes=2 * sr * sc * 4,
                    triton=lambda: triton_ref.softmax(sx, so1), ref=lambda: torch.softmax(sx, 1),
                    tensors={"input_ptr": sx, "output_ptr": so2}, t_out=so1, g_out="output_ptr",
                    tol=1e-5))

    lr, lc = 4096, 8192
    lx = torch.randn(lr, lc, device=dev, dtype=torch.float16)
    lw = torch.rand(lc, device=dev, dtype=torch.float16)
    lb = torch.rand(lc, device=dev, dtype=torch.float16)
    ly1, ly2 = torch.empty_like(lx), torch.empty_like(lx)
    out.append(dict(case="layer_norm", what="layer_norm 4096x8192 f16", bytes=2 * lr * lc * 2,
                    triton=lambda: triton_ref.layer_norm(lx, lw, lb, ly1),
                    ref=lambda: torch.nn.functional.layer_norm(lx.float(), (lc,), lw.float(), lb.float(), 1e-5).half(),
                    tensors={"X": lx, "Y": ly2, "W": lw, "B": lb}, t_out=ly1, g_out="Y", tol=2e-2))

    for size in (1024, 4096):
        a = torch.randn(size, size, device=dev, dtype=torch.float16)
        b = torch.randn(size, size, device=dev, dtype=torch.float16)
        c1, c2 = torch.empty_like(a), torch.empty_like(a)
        out.append(dict(case=f"matmul_{size}", what=f"matmul f16 {size}^3", flops=2 * size ** 3,
                        triton=(lambda a=a, b=b, c1=c1: triton_ref.matmul(a, b, c1)),
                        ref=(lambda a=a, b=b: a @ b),
                        tensors={"a_ptr": a, "b_ptr": b, "c_ptr": c2}, t_out=c1, g_out="c_ptr",
                        tol=None))
        # The same product, our kernel addressing K tiles from the induction variable.
        c3 = torch.empty_like(a)
        out.append(dict(case=f"matmul_iv_{size}", what=f"matmul f16 {size}^3, K tiles from the induction variable",
                        flops=2 * size ** 3,
                        triton=(lambda a=a, b=b, c1=c1: triton_ref.matmul(a, b, c1)),
                        ref=(lambda a=a, b=b: a @ b),
                        tensors={"a_ptr": a, "b_ptr": b, "c_ptr": c3}, t_out=c1, g_out="c_ptr",
                        tol=None))
    # f32 operands and output, 128x128x32 tiles on 8 warps on both sides: `tl.dot`'s "ieee"
    # precision (plain f32 FMAs; triton-metal's default), then Triton's default "tf32"
    # (tensor cores) for reference, which triton-metal's kernel does not run.
    size = 4096
    fa = torch.randn(size, size, device=dev)
    fb = torch.randn(size, size, device=dev)
    fc1, fc2, fc3 = (torch.empty_like(fa) for _ in range(3))
    for prec, case in (("ieee", f"matmul_f32_{size}"), ("tf32", f"matmul_f32_tf32_{size}")):
        out.append(dict(case=case, what=f"matmul f32 {size}^3, input_precision {prec}",
                        flops=2 * size ** 3,
                        triton=(lambda p=prec, c=(fc1 if prec == "ieee" else fc3): triton_ref.matmul(
                            fa, fb, c, bm=128, bn=128, bk=32, num_warps=8, precision=p)),
                        ref=(lambda: fa.double().matmul(fb.double()).float()),
                        tensors={"a_ptr": fa, "b_ptr": fb, "c_ptr": fc2},
                        t_out=(fc1 if prec == "ieee" else fc3), g_out="c_ptr", tol=1e-2))
    z, h = 4, 32
    for n_ctx, d in ((1024, 64), (4096, 64), (16384, 64), (4096, 128)):
        for causal in (False, True):
            q, k, v = (torch.randn(z, h, n_ctx, d, device=dev, dtype=torch.float16)
                       for _ in range(3))
            o1, o2 = torch.empty_like(q), torch.empty_like(q)
            name = f"attention_{n_ctx}" + ("_d128" if d == 128 else "") + ("_causal" if causal else "")
            flops = 4 * z * h * n_ctx * n_ctx * d * (0.5 if causal else 1.0)
            out.append(dict(
                case=name, what=f"attention fwd f16 {z}x{h}x{n_ctx}x{d}" + (" causal" if causal else ""),
                flops=flops,
                triton=(lambda q=q, k=k, v=v, o1=o1, c=causal: triton_ref.attention(q, k, v, o1, 0.5, c)),
                ref=(lambda q=q, k=k, v=v, c=causal: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=c, scale=0.5)),
                tensors={"Q": q, "K": k, "V": v, "Out": o2}, t_out=o1, g_out="Out", tol=1e-2))
    return out


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "generated")
    gen = Generated(folder) if os.path.exists(os.path.join(folder, "manifest.json")) else None
    name = torch.cuda.get_device_name()
    copy = copy_bandwidth()
    print(f"device: {name}; torch {torch.__version__}; triton {triton_ref.triton.__version__}")
    print(f"copy bandwidth (read+write): {copy:.0f} GB/s")
    rows = []
    for c in cases():
        ref = c["ref"]()
        if c["tol"] is None:
            c["tol"] = f16_ulp(ref)
        t_ms = time_ms(c["triton"])
        t_err = (c["t_out"].float() - ref.float()).abs().max().item()
        g_ms, g_err = None, None
        if gen and gen.has(c["case"]):
            run = gen.launcher(c["case"], c["tensors"])
            g_ms = time_ms(run)
            g_err = (c["tensors"][c["g_out"]].float() - ref.float()).abs().max().item()
        if "bytes" in c:
            unit = "GB/s"
            t_rate = c["bytes"] / t_ms / 1e6
            g_rate = c["bytes"] / g_ms / 1e6 if g_ms else None
        else:
            unit = "TFLOP/s"
            t_rate = c["flops"] / t_ms / 1e9
            g_rate = c["flops"] / g_ms / 1e9 if g_ms else None
        rows.append((c["what"], unit, g_rate, t_rate, g_err, t_err, c["tol"], "bytes" in c))
        del ref
    print()
    print(f"| case | unit | triton-metal | Triton | ratio | % of copy BW | max err (ours / Triton) |")
    print(f"|---|---|---|---|---|---|---|")
    failed = False
    for what, unit, g, t, ge, te, tol, mem in rows:
        ratio = f"{g / t:.2f}" if g else "-"
        pct = f"{100 * g / copy:.0f}%" if (g and mem) else "-"
        gs = f"{g:.0f}" if g and unit == "GB/s" else (f"{g:.1f}" if g else "not run")
        ts = f"{t:.0f}" if unit == "GB/s" else f"{t:.1f}"
        err = f"{ge:.2e} / {te:.2e}" if ge is not None else f"- / {te:.2e}"
        print(f"| {what} | {unit} | {gs} | {ts} | {ratio} | {pct} | {err} |")
        if ge is not None and not ge <= tol:
            print(f"  !! {what}: triton-metal result off by {ge} (tolerance {tol})")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
