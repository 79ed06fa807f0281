import torch, triton, triton.language as tl
from triton.language.extra import libdevice

@triton.jit
def k(x, y, o, N: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(x + i)
    b = tl.load(y + i)
    tl.store(o + i, libdevice.pow(a, b))
    tl.store(o + N + i, libdevice.hypot(a, b))
    tl.store(o + 2 * N + i, libdevice.atan2(a, b))

cases = [(0x7f8dc304, 0x00000000), (0x7f8dc304, 0x80000000), (0x7fc00000, 0), (0x3f800000, 0x7f8dc304),
         (0x3f800000, 0x7fc00000), (0x7f800000, 0x7f8dc304), (0xff800000, 0x7fc00000), (0x7f8dc304, 0x7f800000),
         (0xbf800000, 0x7f800000), (0xff8dc304, 0), (0x7f8dc304, 0x3f800000), (0x7fc00000, 0x7f800000),
         (0x7f8dc304, 0x7f8dc304), (0x3f800000, 0x7f800000), (0x3f800000, 0xff8dc304), (0x7fc00001, 0)]
N = 16
f = lambda us: torch.tensor(us, dtype=torch.int64).to(torch.int32).view(torch.float32).cuda()
x = f([a for a, _ in cases]); y = f([b for _, b in cases])
o = torch.full((3 * N,), 77.0, device="cuda")
k[(1,)](x, y, o, N=N)
r = [v & 0xffffffff for v in o.view(torch.int32).cpu().tolist()]
print("triton", triton.__version__)
for i, (a, b) in enumerate(cases):
    print(f"x={a:#010x} y={b:#010x}: pow {r[i]:#010x} hypot {r[N+i]:#010x} atan2 {r[2*N+i]:#010x}")
