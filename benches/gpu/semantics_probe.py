"""Measures Triton's answers for the semantic corner cases that triton-metal must reproduce.

Run on a machine with an NVIDIA GPU, PyTorch and Triton: `python3 benches/gpu/semantics_probe.py`.
Prints one line per case, `name: value`. Cases that may not terminate on the GPU run in a
child process with a timeout and print `timeout` if it expires.
"""
import datetime
import math
import struct
import subprocess
import sys

import torch
import triton
import triton.language as tl

DEV = "cuda"


def out(name, value):
    print(f"{name}: {value}", flush=True)


def guarded(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - a probe reports whatever failed and goes on
        out(fn.__name__, f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:200]}")


@triton.jit
def cast_kernel(x_ptr, o_ptr, N: tl.constexpr, DST: tl.constexpr, BITS: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + offs, x.to(DST).to(BITS, bitcast=True))


F32_VALUES = [float("nan"), float("inf"), float("-inf"), -1.0, -0.5, 0.5, -0.0, 2.7, -2.7,
              127.9, -128.9, 128.0, -129.0, 255.9, 256.0, 300.5, -300.5, 32767.9, 32768.0,
              -32769.0, 65535.5, 65536.0, 70000.0, 2147483520.0, 2147483648.0, -2147483648.0,
              -2147483904.0, 4294967040.0, 4294967296.0, 1e10, -1e10, 9.2e18, 9.3e18, -9.3e18,
              1.8e19, 1.9e19, 3.0e38, -3.0e38]
F16_VALUES = [float("nan"), float("inf"), float("-inf"), -1.0, -0.5, 0.5, 2.7, -2.7, 127.9,
              -128.9, 128.0, -129.0, 255.9, 256.0, 300.5, -300.5, 32752.0, 32768.0, -32768.0,
              -32800.0, 65504.0, -65504.0]

INT_TYPES = [("i8", tl.int8, tl.int8, torch.int8, 8, True), ("i16", tl.int16, tl.int16, torch.int16, 16, True),
             ("i32", tl.int32, tl.int32, torch.int32, 32, True), ("i64", tl.int64, tl.int64, torch.int64, 64, True),
             ("u8", tl.uint8, tl.int8, torch.int8, 8, False), ("u16", tl.uint16, tl.int16, torch.int16, 16, False),
             ("u32", tl.uint32, tl.int32, torch.int32, 32, False), ("u64", tl.uint64, tl.int64, torch.int64, 64, False)]


def float_to_int():
    for src_name, src_t, values in (("f32", torch.float32, F32_VALUES), ("f16", torch.float16, F16_VALUES),
                                    ("bf16", torch.bfloat16, F32_VALUES)):
        n = 64
        x = torch.zeros(n, dtype=src_t, device=DEV)
        x[: len(values)] = torch.tensor(values, dtype=torch.float32).to(src_t)
        shown = [float(v) for v in x[: len(values)].float().cpu()]
        out(f"cast.{src_name}.inputs", shown)
        for name, dst, bits, tdt, width, signed in INT_TYPES:
            o = torch.empty(n, dtype=tdt, device=DEV)
            cast_kernel[(1,)](x, o, N=n, DST=dst, BITS=bits)
            vals = [int(v) for v in o[: len(values)].cpu()]
            if not signed:
                vals = [v & ((1 << width) - 1) for v in vals]
            out(f"cast.{src_name}->{name}", list(zip(shown, vals)))


@triton.jit
def minmax_kernel(a_ptr, b_ptr, o_ptr, N: tl.constexpr, BITS: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(o_ptr + 0 * N + offs, tl.maximum(a, b).to(BITS, bitcast=True))
    tl.store(o_ptr + 1 * N + offs, tl.minimum(a, b).to(BITS, bitcast=True))
    tl.store(o_ptr + 2 * N + offs, tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL).to(BITS, bitcast=True))
    tl.store(o_ptr + 3 * N + offs, tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL).to(BITS, bitcast=True))


def fmt_float_bits(v, width):
    if width == 32:
        f = struct.unpack("<f", struct.pack("<i", v))[0]
    else:
        f = float(torch.tensor([v], dtype=torch.int16).view(torch.float16 if width == 16 else torch.bfloat16)[0])
    if math.isnan(f):
        return "nan"
    return repr(f)


def max_min():
    specials = [-0.0, 0.0, float("nan"), 1.0, float("-inf"), float("inf")]
    pairs = [(a, b) for a in specials for b in specials]
    n = 64
    for name, fdt, bdt, tbits, width in (("f32", torch.float32, tl.int32, torch.int32, 32),
                                         ("f16", torch.float16, tl.int16, torch.int16, 16),
                                         ("bf16", torch.bfloat16, tl.int16, torch.int16, 16)):
        a = torch.zeros(n, dtype=fdt, device=DEV)
        b = torch.zeros(n, dtype=fdt, device=DEV)
        a[: len(pairs)] = torch.tensor([p[0] for p in pairs], dtype=fdt)
        b[: len(pairs)] = torch.tensor([p[1] for p in pairs], dtype=fdt)
        o = torch.empty(4 * n, dtype=tbits, device=DEV)
        minmax_kernel[(1,)](a, b, o, N=n, BITS=bdt)
        o = o.cpu().tolist()
        for k, op in enumerate(("maximum", "minimum", "maximum_nan_all", "minimum_nan_all")):
            res = [(pairs[i][0], pairs[i][1], fmt_float_bits(o[k * n + i], width)) for i in range(len(pairs))]
            out(f"{op}.{name}", res)


@triton.jit
def reduce_kernel(x_ptr, o_ptr, i_ptr, N: tl.constexpr, BITS: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(o_ptr + row * 2 + 0, tl.max(x, axis=0).to(BITS, bitcast=True))
    tl.store(o_ptr + row * 2 + 1, tl.min(x, axis=0).to(BITS, bitcast=True))
    tl.store(i_ptr + row * 2 + 0, tl.argmax(x, axis=0))
    tl.store(i_ptr + row * 2 + 1, tl.argmin(x, axis=0))


def reductions():
    nan = float("nan")
    rows = [[1.0, nan, 3.0, 2.0], [nan, 1.0, 3.0, 2.0], [1.0, 3.0, 2.0, nan], [nan] * 4,
            [-0.0, 0.0, -0.0, 0.0], [0.0, -0.0, 0.0, -0.0], [5.0, 5.0, 1.0, 5.0], [1.0, 1.0, 5.0, 1.0]]
    for name, fdt, bdt, tbits, width in (("f32", torch.float32, tl.int32, torch.int32, 32),
                                         ("f16", torch.float16, tl.int16, torch.int16, 16)):
        x = torch.tensor(rows, dtype=fdt, device=DEV)
        o = torch.empty(len(rows) * 2, dtype=tbits, device=DEV)
        idx = torch.empty(len(rows) * 2, dtype=torch.int32, device=DEV)
        reduce_kernel[(len(rows),)](x, o, idx, N=4, BITS=bdt)
        o = o.cpu().tolist()
        idx = idx.cpu().tolist()
        for r, row in enumerate(rows):
            out(f"reduce.{name}.{row}", f"max={fmt_float_bits(o[2 * r], width)} min={fmt_float_bits(o[2 * r + 1], width)} "
                f"argmax={idx[2 * r]} argmin={idx[2 * r + 1]}")


@triton.jit
def first(a, b):
    return a


@triton.jit
def second(a, b):
    return b


@triton.jit
def lin(a, b):
    return a * 3 + b


@triton.jit
def scan_kernel(x_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(o_ptr + 0 * N + offs, tl.associative_scan(x, 0, first, reverse=True))
    tl.store(o_ptr + 1 * N + offs, tl.associative_scan(x, 0, second, reverse=True))
    tl.store(o_ptr + 2 * N + offs, tl.associative_scan(x, 0, lin, reverse=True))
    tl.store(o_ptr + 3 * N + offs, tl.associative_scan(x, 0, first, reverse=False))
    tl.store(o_ptr + 4 * N + offs, tl.associative_scan(x, 0, lin, reverse=False))


def scans():
    x = torch.arange(1, 9, dtype=torch.int32, device=DEV)
    o = torch.empty(5 * 8, dtype=torch.int32, device=DEV)
    scan_kernel[(1,)](x, o, N=8)
    o = o.cpu().tolist()
    for k, name in enumerate(("reverse_first", "reverse_second", "reverse_a3b", "forward_first", "forward_a3b")):
        out(f"scan.{name}", o[k * 8:(k + 1) * 8])


@triton.jit
def swizzle_kernel(o_ptr, SI: tl.constexpr, SJ: tl.constexpr, SG: tl.constexpr, PI: tl.constexpr,
                   PJ: tl.constexpr):
    i = tl.arange(0, PI)[:, None] + tl.zeros([PI, PJ], dtype=tl.int32)
    j = tl.arange(0, PJ)[None, :] + tl.zeros([PI, PJ], dtype=tl.int32)
    ni, nj = tl.swizzle2d(i, j, SI, SJ, SG)
    offs = i * PJ + j
    tl.store(o_ptr + 2 * offs, ni)
    tl.store(o_ptr + 2 * offs + 1, nj)


def swizzle():
    for si, sj, sg in ((5, 7, 3), (4, 4, 2), (7, 3, 4)):
        o = torch.empty(8 * 8 * 2, dtype=torch.int32, device=DEV)
        swizzle_kernel[(1,)](o, SI=si, SJ=sj, SG=sg, PI=8, PJ=8)
        o = o.cpu().tolist()
        res = {(i, j): (o[2 * (i * 8 + j)], o[2 * (i * 8 + j) + 1]) for i in range(si) for j in range(sj)}
        out(f"swizzle2d({si},{sj},{sg})", res)


@triton.jit
def constexpr_kernel(o_ptr, x_ptr, A: tl.constexpr, B: tl.constexpr):
    tl.store(o_ptr + 0, A // B)
    tl.store(o_ptr + 1, A % B)
    x = tl.load(x_ptr + 0)
    y = tl.load(x_ptr + 1)
    tl.store(o_ptr + 2, x // y)
    tl.store(o_ptr + 3, x % y)


def constexpr_div():
    for a, b in ((-7, 2), (7, -2), (-7, -2), (-6, 3), (-7, 3)):
        o = torch.empty(4, dtype=torch.int32, device=DEV)
        x = torch.tensor([a, b], dtype=torch.int32, device=DEV)
        constexpr_kernel[(1,)](o, x, A=a, B=b)
        out(f"div({a},{b})", f"constexpr //={o[0].item()} %={o[1].item()}; runtime i32 //={o[2].item()} %={o[3].item()}")


@triton.jit
def range_runtime_kernel(o_ptr, start, end, step):
    n = 0
    for i in range(start, end, step):
        tl.store(o_ptr + 1 + n, i)
        n += 1
    tl.store(o_ptr, n)


@triton.jit
def range_const_kernel(o_ptr, START: tl.constexpr, END: tl.constexpr, STEP: tl.constexpr):
    n = 0
    for i in range(START, END, STEP):
        tl.store(o_ptr + 1 + n, i)
        n += 1
    tl.store(o_ptr, n)


@triton.jit
def range_count_kernel(o_ptr, start, end, step):
    n = 0
    for i in range(start, end, step):
        n += 1
        tl.store(o_ptr + 1, i)
    tl.store(o_ptr, n)


def child_range(which):
    o = torch.full((64,), -99, dtype=torch.int32, device=DEV)
    if which == "runtime_neg":
        range_runtime_kernel[(1,)](o, 10, 0, -3)
    elif which == "const_neg":
        range_const_kernel[(1,)](o, START=10, END=0, STEP=-3)
    elif which == "const_neg_ragged":
        range_const_kernel[(1,)](o, START=9, END=-1, STEP=-4)
    elif which == "runtime_big":
        range_count_kernel[(1,)](o, 0, 2147483647, 1 << 30)
    elif which == "runtime_zero":
        range_count_kernel[(1,)](o, 0, 10, 0)
    torch.cuda.synchronize()
    r = o.cpu().tolist()
    n = r[0]
    print(f"count={n} values={r[1:1 + max(0, min(n, 20))] if which != 'runtime_big' else r[1]}")


def ranges():
    for which in ("runtime_neg", "const_neg", "const_neg_ragged", "runtime_big", "runtime_zero"):
        try:
            p = subprocess.run([sys.executable, __file__, "--range", which], capture_output=True, text=True, timeout=40)
            text = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ("ERROR " + p.stderr.strip().splitlines()[-1][:200] if p.stderr.strip() else "no output")
        except subprocess.TimeoutExpired:
            text = "timeout (40 s): does not terminate"
        out(f"range.{which}", text)


@triton.jit
def int_kernel(x_ptr, s_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    s = tl.load(s_ptr + offs)
    tl.store(o_ptr + 0 * N + offs, tl.abs(x))
    tl.store(o_ptr + 1 * N + offs, x + 2147483647)
    tl.store(o_ptr + 2 * N + offs, x * 65537)
    tl.store(o_ptr + 3 * N + offs, -x)
    tl.store(o_ptr + 4 * N + offs, x << s)
    tl.store(o_ptr + 5 * N + offs, x >> s)
    tl.store(o_ptr + 6 * N + offs, (x.to(tl.uint32, bitcast=True) >> s.to(tl.uint32)).to(tl.int32, bitcast=True))


def integers():
    xs = [-2147483648, 2147483647, -1, 1, 123456789, -123456789, 7, -7]
    ss = [0, 1, 31, 32, 33, 40, -1, 64]
    x = torch.tensor(xs, dtype=torch.int32, device=DEV)
    s = torch.tensor(ss, dtype=torch.int32, device=DEV)
    o = torch.empty(7 * 8, dtype=torch.int32, device=DEV)
    int_kernel[(1,)](x, s, o, N=8)
    o = o.cpu().tolist()
    out("int.x", xs)
    out("int.shift", ss)
    for k, name in enumerate(("abs", "x+INT_MAX", "x*65537", "-x", "x<<s", "x>>s (arith)", "u32(x)>>s")):
        out(f"int.{name}", o[k * 8:(k + 1) * 8])


@triton.jit
def dot_kernel(a_ptr, b_ptr, o_ptr, o32_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, out_dtype=tl.float16))
    tl.store(o32_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@triton.jit
def dot_acc_kernel(a_ptr, b_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    acc = tl.zeros([M, N], dtype=tl.float16)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc)


def dots():
    M = N = 16
    for K in (16, 64, 256):
        a = torch.ones(M, K, dtype=torch.float16, device=DEV)
        b = torch.full((K, N), 2.0 ** -11, dtype=torch.float16, device=DEV)
        b[0, :] = 1.0
        o = torch.empty(M, N, dtype=torch.float16, device=DEV)
        o32 = torch.empty(M, N, dtype=torch.float32, device=DEV)
        dot_kernel[(1,)](a, b, o, o32, M=M, N=N, K=K)
        exact = 1.0 + (K - 1) * 2.0 ** -11
        out(f"dot.f16out.ones_plus_tiny.K{K}", f"triton={o[0, 0].item()!r} f32acc={o32[0, 0].item()!r} "
            f"exact={exact!r} exact_rounded_f16={float(torch.tensor(exact).half())!r}")
        o2 = torch.empty(M, N, dtype=torch.float16, device=DEV)
        dot_acc_kernel[(1,)](a, b, o2, M=M, N=N, K=K, BK=16)
        out(f"dot.f16acc_loop_bk16.ones_plus_tiny.K{K}", repr(o2[0, 0].item()))
    torch.manual_seed(0)
    for K in (16, 64, 256):
        a = torch.randn(M, K, dtype=torch.float16, device=DEV)
        b = torch.randn(K, N, dtype=torch.float16, device=DEV)
        o = torch.empty(M, N, dtype=torch.float16, device=DEV)
        o32 = torch.empty(M, N, dtype=torch.float32, device=DEV)
        dot_kernel[(1,)](a, b, o, o32, M=M, N=N, K=K)
        ref = (a.double() @ b.double())
        f32round = o32.half()
        eq = (o == f32round).float().mean().item()
        err = ((o.double() - ref).abs().max().item(), (f32round.double() - ref).abs().max().item())
        out(f"dot.f16out.randn.K{K}", f"fraction equal to f32-accumulate-then-round={eq:.4f} max|err| triton={err[0]:.3g} f32round={err[1]:.3g}")


try:
    from triton.language.extra import libdevice
except ImportError:
    from triton.language.extra.cuda import libdevice


@triton.jit
def tanh_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, libdevice.tanh(tl.load(x_ptr + offs, mask=m)), mask=m)


def tanh():
    xs = torch.cat([torch.logspace(-8, 1.3, 200000, dtype=torch.float64), torch.tensor([1e-3, 1.01e-3, 5e-4, 0.55, 0.6])])
    xs = torch.cat([xs, -xs]).float()
    x = xs.to(DEV)
    o = torch.empty_like(x)
    tanh_kernel[(triton.cdiv(x.numel(), 1024),)](x, o, x.numel(), BLOCK=1024)
    ref = torch.tanh(xs.double())
    rel = ((o.cpu().double() - ref).abs() / ref.abs()).nan_to_num(0)
    worst = rel.argmax().item()
    out("tanh.libdevice.max_rel_err", f"{rel.max().item():.3g} at x={xs[worst].item():.6g}")
    for v in (1e-3, 1.01e-3, 5e-4, 0.55):
        i = (xs == torch.tensor(v, dtype=torch.float32)).nonzero()[0].item()
        out(f"tanh.libdevice({v})", f"{o[i].item()!r} ref={ref[i].item()!r} rel={rel[i].item():.3g}")
    ulp = ((o.cpu().double() - ref).abs() / (torch.nextafter(ref.float().abs(), torch.tensor(float('inf'))).double() - ref.float().abs().double())).max().item()
    out("tanh.libdevice.max_err_ulps_approx", f"{ulp:.3g}")


@triton.jit
def xor_kernel(x_ptr, o_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N)) != 0
    tl.store(o_ptr, tl.xor_sum(x, axis=0).to(tl.int32))


def xor_bool():
    for bits in ([1, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]):
        x = torch.tensor(bits, dtype=torch.int32, device=DEV)
        o = torch.empty(1, dtype=torch.int32, device=DEV)
        xor_kernel[(1,)](x, o, N=4)
        out(f"xor_sum.int1.{bits}", o.item())


@triton.jit
def atomic_bf16_kernel(p_ptr, v_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.atomic_add(p_ptr + offs % 2, tl.load(v_ptr + offs))


def atomic_bf16():
    p = torch.zeros(2, dtype=torch.bfloat16, device=DEV)
    v = torch.full((64,), 1.0, dtype=torch.bfloat16, device=DEV)
    atomic_bf16_kernel[(4,)](p, v, N=64)
    out("atomic_add.bf16.4x64_ones_into_2", p.float().cpu().tolist())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--range":
        child_range(sys.argv[2])
        sys.exit(0)
    out("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    out("device", torch.cuda.get_device_name(0))
    out("versions", f"torch {torch.__version__} triton {triton.__version__}")
    for f in (float_to_int, max_min, reductions, scans, swizzle, constexpr_div, integers, dots, tanh, xor_bool,
              atomic_bf16, ranges):
        guarded(f)
