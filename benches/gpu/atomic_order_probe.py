"""Triton's float atomic_max/atomic_min on every pair of edge values (old value, operand),
compared with IEEE totalOrder; prints the Triton version, the GPU and every pair that
differs. Run on the H100 machine: `python3 benches/gpu/atomic_order_probe.py`."""
import struct

import torch
import triton
import triton.language as tl

EDGES = [0xFFC00000, 0xFF800000, 0xBFC00000, 0x80000001, 0x80000000, 0x00000000,
         0x00000001, 0x40200000, 0x7F800000, 0x7FC00000, 0x7FC00001]


@triton.jit
def probe(p, v, q, N: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(v + offs, mask=m)
    a = tl.atomic_max(p + offs, x, mask=m)
    b = tl.atomic_min(p + N + offs, x, mask=m)
    tl.store(q + offs, a, mask=m)
    tl.store(q + N + offs, b, mask=m)


def key(u):
    # totalOrder as an unsigned key.
    return u ^ (0xFFFFFFFF if u >> 31 else 0x80000000)


def main():
    old = [a for a in EDGES for _ in EDGES]
    val = [b for _ in EDGES for b in EDGES]
    n = len(old)
    as_f = lambda us: torch.tensor(us, dtype=torch.int64).to(torch.int32).view(torch.float32)
    p = as_f(old + old).cuda()
    v = as_f(val).cuda()
    q = torch.full((2 * n,), float("nan"), device="cuda")
    probe[(1,)](p, v, q, N=n, BLOCK=128)
    got = [x & 0xFFFFFFFF for x in p.view(torch.int32).cpu().tolist()]
    ret = [x & 0xFFFFFFFF for x in q.view(torch.int32).cpu().tolist()]
    print("triton", triton.__version__, "torch", torch.__version__, torch.cuda.get_device_name())
    bad = 0
    for i in range(n):
        o, x = old[i], val[i]
        want_max = x if key(x) > key(o) else o
        want_min = x if key(x) < key(o) else o
        for name, w, g in (("max", want_max, got[i]), ("min", want_min, got[n + i])):
            if w != g:
                bad += 1
                print(f"atomic_{name}(old={o:#010x}, val={x:#010x}): triton {g:#010x}, totalOrder {w:#010x}")
        if ret[i] != o or ret[n + i] != o:
            print(f"returned old value differs at {i}: {ret[i]:#010x} {ret[n+i]:#010x} want {o:#010x}")
    print(f"{2 * n} atomics, {bad} differ from IEEE totalOrder")


if __name__ == "__main__":
    main()
