"""Runs the generated vector add, matmuls and attention on misaligned views (each base
pointer one element past an aligned allocation) and checks them against PyTorch: chunk
accesses whose alignment is tested on the base pointer must fall back to element accesses,
and loops copied ahead run their version with element-wise copies.

Run on the NVIDIA machine from the repository root:

    python3 benches/gpu/misaligned_check.py benches/gpu/generated
"""
import sys
sys.path.insert(0, "benches/gpu")
import bench, torch
g = bench.Generated(sys.argv[1])
spec = g.kernels["vector_add"]
n = 1 << 20
def shifted(t):
    buf = torch.empty(t.numel() + 1, dtype=t.dtype, device="cuda")
    v = buf[1:]
    v.copy_(t)
    return v
x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda")
xs, ys = shifted(x), shifted(y)
out = shifted(torch.full((n,), float("nan"), device="cuda"))
assert xs.data_ptr() % 16 == 4
# vector_add's manifest was printed for 2^28 elements; launch it for n through its params
s = dict(spec)
s["params"] = [dict(p, value=n) if p["role"] == "scalar" else p for p in spec["params"]]
s["grid"] = [n // 1024, 1, 1]
g.kernels["vector_add_small"] = s
names = [p["name"] for p in spec["params"] if p["role"] != "scalar"]
run = g.launcher("vector_add_small", dict(zip(names, [xs, ys, out])))
run(); torch.cuda.synchronize()
err = (out - (x + y)).abs().max().item()
print("vector_add misaligned max err", err)
assert err == 0.0

spec = g.kernels["matmul_1024"]
m = 1024
a = torch.randn(m, m, device="cuda", dtype=torch.float16)
b = torch.randn(m, m, device="cuda", dtype=torch.float16)
ref = (a.float() @ b.float())
for which in ["a", "b", "c", "abc"]:
    av = shifted(a.flatten()).view(m, m) if "a" in which else a
    bv = shifted(b.flatten()).view(m, m) if "b" in which else b
    cv = shifted(torch.full((m * m,), float("nan"), device="cuda", dtype=torch.float16)).view(m, m) if "c" in which else torch.full((m, m), float("nan"), device="cuda", dtype=torch.float16)
    run = g.launcher("matmul_1024", {"a_ptr": av, "b_ptr": bv, "c_ptr": cv})
    run(); torch.cuda.synchronize()
    err = (cv.float() - ref).abs().max().item()
    tol = 2 * bench.f16_ulp(ref)
    print(f"matmul_1024 misaligned {which}: max err {err:.3e} (tol {tol:.3e})")
    assert err <= tol, which
for case in ["matmul_iv_1024"]:
    for which in ["a", "b"]:
        av = shifted(a.flatten()).view(m, m) if "a" in which else a
        bv = shifted(b.flatten()).view(m, m) if "b" in which else b
        cv = torch.full((m, m), float("nan"), device="cuda", dtype=torch.float16)
        run = g.launcher(case, {"a_ptr": av, "b_ptr": bv, "c_ptr": cv})
        run(); torch.cuda.synchronize()
        err = (cv.float() - ref).abs().max().item()
        tol = 2 * bench.f16_ulp(ref)
        print(f"{case} misaligned {which}: max err {err:.3e} (tol {tol:.3e})")
        assert err <= tol, (case, which)

z, h, n_ctx, d = 4, 32, 1024, 64
for case in ["attention_1024", "attention_1024_causal"]:
    causal = case.endswith("causal")
    q, k, v = (torch.randn(z, h, n_ctx, d, device="cuda", dtype=torch.float16) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.5)
    for which in ["q", "k", "v", "qkvo"]:
        t = {n: (shifted(x.flatten()).view(x.shape) if n in which else x) for n, x in
             [("q", q), ("k", k), ("v", v)]}
        o = torch.full_like(q, float("nan"))
        o = shifted(o.flatten()).view(q.shape) if "o" in which else o
        run = g.launcher(case, {"Q": t["q"], "K": t["k"], "V": t["v"], "Out": o})
        run(); torch.cuda.synchronize()
        err = (o.float() - ref.float()).abs().max().item()
        print(f"{case} misaligned {which}: max err {err:.3e}")
        assert err <= 1e-2, (case, which)
print("misaligned: all ok")
