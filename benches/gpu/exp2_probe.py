"""What Triton's `tl.exp2` computes on fp32 on an NVIDIA GPU: its results beside PTX's
`ex2.approx.f32` and `ex2.approx.ftz.f32` (inline assembly in the same kernel), bit for
bit, over 2M inputs (a sweep over [-160, 130], the subnormal-result range [-150, -120],
and edge values), and whether subnormal results survive.

Run on the NVIDIA machine: `python3 benches/gpu/exp2_probe.py`.
"""
import torch, triton, triton.language as tl
@triton.jit
def k(x, o1, o2, o3, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(x + i, mask=m)
    tl.store(o1 + i, tl.exp2(v), mask=m)
    a = tl.inline_asm_elementwise("ex2.approx.f32 $0, $1;", "=r,r", [v], dtype=tl.float32, is_pure=True, pack=1)
    b = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [v], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(o2 + i, a, mask=m)
    tl.store(o3 + i, b, mask=m)
g = torch.Generator().manual_seed(0)
parts = [torch.linspace(-160, 130, 1 << 20, dtype=torch.float64).float(),
         (torch.rand(1 << 20, generator=g, dtype=torch.float64) * -30 - 120).float(),
         torch.tensor([float('nan'), float('inf'), float('-inf'), 0.0, -0.0, -126.0, -126.5, -127.0, -140.0, -149.0, -149.5, -150.0, 127.9999, 128.0, 1e-40, -1e-40])]
x = torch.cat(parts).cuda()
n = x.numel()
o = [torch.empty_like(x) for _ in range(3)]
k[(triton.cdiv(n, 1024),)](x, *o, n, BLOCK=1024)
torch.cuda.synchronize()
ex = torch.exp2(x.double())
def cmp(name, y):
    same = (y.view(torch.int32) == o[0].view(torch.int32)) | (torch.isnan(y) & torch.isnan(o[0]))
    print(name, "bitwise equal to tl.exp2:", same.all().item(), "mismatches:", (~same).sum().item())
cmp("ex2.approx.f32", o[1]); cmp("ex2.approx.ftz.f32", o[2])
sub = (ex > 0) & (ex < 2.0 ** -126)
print("subnormal-result inputs:", sub.sum().item(), "tl.exp2 zero there:", (o[0][sub] == 0).sum().item())
# Relative error where the exact result is a normal fp32 (below 2^128 and at least 2^-126),
# and the largest difference in units of the last place of the exact result.
normal = torch.isfinite(ex) & (ex >= 2.0 ** -126) & (ex < 2.0 ** 128)
rel = ((o[0].double() - ex).abs() / ex)[normal]
ulp = torch.exp2(torch.floor(torch.log2(ex[normal])) - 23)
print("max rel err (normal results): %.3e = 2^%.2f" % (rel.max().item(), torch.log2(rel.max()).item()))
print("max error in ulps of the exact result: %.2f" % ((o[0].double()[normal] - ex[normal]).abs() / ulp).max().item())
for v in [-126.5, -140.0, -149.0, 1e-40]:
    j = (x == v).nonzero()[0].item(); print(v, o[0][j].item(), o[1][j].item(), o[2][j].item(), ex[j].item())
