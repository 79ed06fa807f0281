"""Measures Triton's block pointers and tensor descriptors on the cases tests/block_ptr.rs runs.

Run on a machine with an NVIDIA GPU, PyTorch and Triton: `python3 benches/gpu/block_ptr_probe.py`.
Prints one line per case, `name: value`. Each value case is compared with a NumPy model of the
semantics triton-metal implements (the model tests/block_ptr.rs checks every target against):
`ok` when Triton agrees element for element (NaN equal to NaN), else `MISMATCH` with both.
Cases Triton leaves undefined print what it returned (`info`); argument errors print the
exception Triton raised (`refused`) or `ACCEPTED` if it took the bad argument.
"""
import datetime
import subprocess
import sys

import numpy as np
import torch
import triton
import triton.language as tl

DEV = "cuda"
BM, BN = 8, 16


def out(name, value):
    print(f"{name}: {value}", flush=True)


def guarded(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - a probe reports whatever failed and goes on
        out(fn.__name__, f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def compare(name, got, want, width=None):
    """`ok`, or the number of differing elements and the first few as (index, triton, model);
    with `width`, indices are (row, column) of rows of that many elements."""
    got, want = np.asarray(got, dtype=np.float64).ravel(), np.asarray(want, dtype=np.float64).ravel()
    if got.shape != want.shape:
        out(name, f"MISMATCH shapes {got.shape} {want.shape}")
        return
    bad = np.nonzero(~((got == want) | (np.isnan(got) & np.isnan(want))))[0]
    if len(bad) == 0:
        out(name, "ok")
        return
    at = (lambda i: divmod(int(i), width)) if width else int
    first = [(at(i), float(got[i]), float(want[i])) for i in bad[:6]]
    out(name, f"MISMATCH {len(bad)} of {len(got)} elements, first (index, triton, model): {first}")


def values(n, seed):
    """The edge values of tests/block_ptr.rs (NaN, +-inf, +-0, f32 max, a subnormal) among others."""
    edges = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 3.4028234663852886e38, -2.0, 1e-40]
    v = []
    for i in range(n):
        h = (i * 2654435761 + seed * 97) & 0xFFFFFFFF
        v.append(edges[(h // 7) % len(edges)] if h % 7 == 0 else ((h >> 8) % 2001) / 100.0 - 10.0)
    return np.array(v, dtype=np.float32)


def model_tile(x, r0, c0, pad):
    """The BM x BN block at (r0, c0) of the 2-D array x, `pad` outside it."""
    t = np.full((BM, BN), pad, dtype=np.float64)
    for a in range(BM):
        for b in range(BN):
            r, c = r0 + a, c0 + b
            if 0 <= r < x.shape[0] and 0 <= c < x.shape[1]:
                t[a, b] = x[r, c]
    return t


# ---- block pointers ----------------------------------------------------------------------------


@triton.jit
def bp_tiles_kernel(x_ptr, tz_ptr, tn_ptr, y_ptr, M, N, SM, SN, LDY, BM: tl.constexpr, BN: tl.constexpr):
    p0 = tl.program_id(0)
    p1 = tl.program_id(1)
    src = tl.make_block_ptr(x_ptr, (M, N), (SM, SN), (p0 * BM, p1 * BN), (BM, BN), (1, 0))
    src_c = tl.make_block_ptr(x_ptr, (M, N), (SM, SN), (p0 * BM, p1 * BN), (BM, BN), (0, 1))
    zero = tl.load(src, boundary_check=(0, 1), padding_option="zero")
    nan = tl.load(src_c, boundary_check=(1, 0), padding_option="nan")
    tile = (p0 * tl.num_programs(1) + p1) * (BM * BN)
    idx = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(tz_ptr + tile + idx, zero)
    tl.store(tn_ptr + tile + idx, nan)
    dst = tl.make_block_ptr(y_ptr, (M, N), (LDY, 1), (p0 * BM, p1 * BN), (BM, BN), (1, 0))
    tl.store(dst, nan, boundary_check=(0, 1))


def block_ptr_tiles():
    m, n = 13, 37
    g0, g1 = triton.cdiv(m, BM), triton.cdiv(n, BN)
    ldy = n + 3
    for layout, sm, sn, alloc, seed in (("row_major_ld40", 40, 1, m * 40, 1), ("col_major_ld16", 1, 16, 16 * n, 2)):
        data = values(alloc, seed)
        x2 = np.array([[data[r * sm + c * sn] for c in range(n)] for r in range(m)], dtype=np.float32)
        x = torch.tensor(data, device=DEV)
        tiles = g0 * g1 * BM * BN
        tz = torch.full((tiles,), -777.0, device=DEV)
        tn = torch.full((tiles,), -777.0, device=DEV)
        y = torch.full((m * ldy,), -777.0, device=DEV)
        bp_tiles_kernel[(g0, g1)](x, tz, tn, y, m, n, sm, sn, ldy, BM=BM, BN=BN)
        tz, tn, y = tz.cpu().numpy(), tn.cpu().numpy(), y.cpu().numpy()
        for pad, got in ((0.0, tz), (float("nan"), tn)):
            want = np.concatenate([model_tile(x2, t0 * BM, t1 * BN, pad).ravel() for t0 in range(g0) for t1 in range(g1)])
            compare(f"block_ptr.tiles.{layout}.padding_{'zero' if pad == 0.0 else 'nan'}", got, want)
        want_y = np.full((m, ldy), -777.0)
        want_y[:, :n] = x2
        compare(f"block_ptr.store_checked.{layout}", y, want_y, width=ldy)


@triton.jit
def bp_default_padding_kernel(x_ptr, o_ptr, N):
    p = tl.make_block_ptr(x_ptr, (N,), (1,), (0,), (16,), (0,))
    tl.store(o_ptr + tl.arange(0, 16), tl.load(p, boundary_check=(0,)))


def block_ptr_default_padding():
    x = torch.arange(1, 11, dtype=torch.float32, device=DEV)
    o = torch.full((16,), -777.0, device=DEV)
    bp_default_padding_kernel[(1,)](x, o, 10)
    out("block_ptr.default_padding.lanes_10_to_15 (undefined in Triton; 0 here) info", o[10:].cpu().tolist())


@triton.jit
def bp_1d_kernel(xi_ptr, xh_ptr, xb_ptr, oi_ptr, oh_ptr, ob_ptr, N):
    lanes = tl.arange(0, 16)
    pi = tl.make_block_ptr(xi_ptr, (N,), (1,), (-5,), (16,), (0,))
    tl.store(oi_ptr + lanes, tl.load(pi, boundary_check=(0,), padding_option="zero"))
    pi = tl.advance(pi, (8,))
    tl.store(oi_ptr + 16 + lanes, tl.load(pi, boundary_check=(0,), padding_option="zero"))
    pi = tl.advance(pi, (-16,))
    tl.store(oi_ptr + 32 + lanes, tl.load(pi, boundary_check=(0,), padding_option="zero"))
    ph = tl.make_block_ptr(xh_ptr, (N,), (1,), (3,), (16,), (0,))
    tl.store(oh_ptr + lanes, tl.load(ph, boundary_check=(0,), padding_option="nan"))
    pb = tl.make_block_ptr(xb_ptr, (N,), (1,), (0,), (16,), (0,))
    bits = tl.load(pb, boundary_check=(0,), padding_option="zero")
    tl.store(ob_ptr + lanes, bits)


@triton.jit
def bp_bool_dtype_kernel(xb_ptr, N):
    pb = tl.make_block_ptr(xb_ptr, (N,), (1,), (0,), (16,), (0,))
    bits = tl.load(pb, boundary_check=(0,), padding_option="zero")
    tl.static_assert(bits.dtype == tl.int8, "a bool block pointer loads int8")


def block_ptr_offsets_advance_and_dtypes():
    n = 10
    xi = np.array([i * 7 - 20 for i in range(n)], dtype=np.int32)
    xh = np.array([i - 4.5 for i in range(n)], dtype=np.float16)
    xb = np.array([i % 3 == 0 for i in range(n)])
    oi = torch.full((48,), -777, dtype=torch.int32, device=DEV)
    oh = torch.full((16,), -777.0, dtype=torch.float16, device=DEV)
    ob = torch.full((16,), -7, dtype=torch.int8, device=DEV)
    bp_1d_kernel[(1,)](torch.tensor(xi, device=DEV), torch.tensor(xh, device=DEV), torch.tensor(xb, device=DEV),
                       oi, oh, ob, n)

    def window(start, src, pad):
        return [src[i] if 0 <= i < n else pad for i in range(start, start + 16)]

    compare("block_ptr.i32.offset_-5_advance_8_advance_-16", oi.cpu().numpy(),
            window(-5, xi, 0) + window(3, xi, 0) + window(-13, xi, 0))
    compare("block_ptr.f16.offset_3.padding_nan", oh.float().cpu().numpy(), window(3, xh.astype(np.float64), float("nan")))
    compare("block_ptr.bool_values", ob.cpu().numpy(), window(0, xb.astype(np.int8), 0))
    try:
        bp_bool_dtype_kernel[(1,)](torch.tensor(xb, device=DEV), n)
        out("block_ptr.bool_loads_int8", "ok")
    except Exception as e:  # noqa: BLE001
        out("block_ptr.bool_loads_int8", f"MISMATCH {type(e).__name__}: {str(e).splitlines()[0][:200]}")


@triton.jit
def bp_bad_kernel(x_ptr, CASE: tl.constexpr):
    p = tl.make_block_ptr(x_ptr, (8, 8), (8, 1), (0, 0), (8, 8), (1, 0))
    if CASE == 0:
        tl.load(p, boundary_check=(0, 2))
    elif CASE == 1:
        tl.load(p, boundary_check=(0,), padding_option="zeros")
    elif CASE == 2:
        tl.advance(p, (8,))
    elif CASE == 3:
        tl.load(p, mask=tl.full((8, 8), True, tl.int1))
    elif CASE == 4:
        tl.store(p, tl.zeros((8, 8), tl.float16))
    elif CASE == 5:
        tl.store(p, tl.zeros((1, 8), tl.float32))


@triton.jit
def bp_bad_int_kernel(x_ptr):
    p = tl.make_block_ptr(x_ptr, (8,), (1,), (0,), (8,), (0,))
    tl.load(p, boundary_check=(0,), padding_option="nan")


def block_ptr_errors():
    x = torch.zeros(64, device=DEV)
    names = ["boundary_check_dim_2_of_2", "padding_zeros", "advance_rank_mismatch", "mask_on_block_ptr",
             "store_f16_into_f32", "store_shape_1x8_into_8x8"]
    for case, name in enumerate(names):
        try:
            bp_bad_kernel[(1,)](x, CASE=case)
            out(f"block_ptr.error.{name}", "ACCEPTED")
        except Exception as e:  # noqa: BLE001
            out(f"block_ptr.error.{name}", f"refused {type(e).__name__}")
    try:
        bp_bad_int_kernel[(1,)](torch.zeros(8, dtype=torch.int32, device=DEV))
        out("block_ptr.error.nan_padding_i32", "ACCEPTED")
    except Exception as e:  # noqa: BLE001
        out("block_ptr.error.nan_padding_i32", f"refused {type(e).__name__}")


# ---- tensor descriptors ------------------------------------------------------------------------


def alloc(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device=DEV)


@triton.jit
def desc_tiles_kernel(x_ptr, tz_ptr, y_ptr, M, N, LDX, LDY, BM: tl.constexpr, BN: tl.constexpr):
    p0 = tl.program_id(0)
    p1 = tl.program_id(1)
    dx = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[LDX, 1], block_shape=[BM, BN])
    dy = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[LDY, 1], block_shape=[BM, BN])
    tile = (p0 * tl.num_programs(1) + p1) * (BM * BN)
    idx = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(tz_ptr + tile + idx, dx.load([p0 * BM - 3, p1 * BN - 8]))
    dy.store([p0 * BM, p1 * BN], dx.load([p0 * BM, p1 * BN]))


@triton.jit
def desc_nan_kernel(x_ptr, tn_ptr, M, N, LDX, BM: tl.constexpr, BN: tl.constexpr):
    p0 = tl.program_id(0)
    p1 = tl.program_id(1)
    dn = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[LDX, 1], block_shape=[BM, BN],
                                   padding_option="nan")
    tile = (p0 * tl.num_programs(1) + p1) * (BM * BN)
    idx = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(tn_ptr + tile + idx, dn.load([p0 * BM - 3, p1 * BN - 8]))


def descriptor_tiles():
    triton.set_allocator(alloc)
    m, n, ldx = 13, 37, 40
    g0, g1 = triton.cdiv(m, BM) + 1, triton.cdiv(n, BN) + 1
    ldy = n + 3
    for dtype, tdt, seed in (("f32", torch.float32, 5), ("f16", torch.float16, 5)):
        data = values(m * ldx, seed)
        x = torch.tensor(data, device=DEV).to(tdt)
        x2 = x.float().cpu().numpy().reshape(m, ldx)[:, :n]
        tiles = g0 * g1 * BM * BN
        tz = torch.full((tiles,), -777.0, device=DEV).to(tdt)
        y = torch.full((m * ldy,), -777.0, device=DEV).to(tdt)
        desc_tiles_kernel[(g0, g1)](x, tz, y, m, n, ldx, ldy, BM=BM, BN=BN)
        want = np.concatenate([model_tile(x2, t0 * BM - 3, t1 * BN - 8, 0.0).ravel() for t0 in range(g0) for t1 in range(g1)])
        compare(f"descriptor.{dtype}.tiles_shifted_-3_-8.padding_zero", tz.float().cpu().numpy(), want)
        want_y = np.full((m, ldy), float(torch.tensor(-777.0).to(tdt)))
        want_y[:, :n] = x2
        compare(f"descriptor.{dtype}.store_drops_out_of_bounds", y.float().cpu().numpy(), want_y, width=ldy)
        try:
            tn = torch.full((tiles,), -777.0, device=DEV).to(tdt)
            desc_nan_kernel[(g0, g1)](x, tn, m, n, ldx, BM=BM, BN=BN)
            want = np.concatenate([model_tile(x2, t0 * BM - 3, t1 * BN - 8, float("nan")).ravel()
                                   for t0 in range(g0) for t1 in range(g1)])
            compare(f"descriptor.{dtype}.tiles_shifted_-3_-8.padding_nan", tn.float().cpu().numpy(), want)
        except Exception as e:  # noqa: BLE001
            out(f"descriptor.{dtype}.padding_nan", f"ERROR {type(e).__name__}: {str(e).splitlines()[0][:200]}")


@triton.jit
def desc_store_edge_kernel(y_ptr, M, N, LD, BM: tl.constexpr, BN: tl.constexpr):
    d = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[LD, 1], block_shape=[BM, BN])
    d.store([0, 32], tl.full((BM, BN), 1.0, tl.float32))


def descriptor_store_edge():
    """Which columns a [2, 16] f32 store at column 32 writes, for N = 33, 37, 40 (row stride 48)."""
    triton.set_allocator(alloc)
    for n in (33, 37, 40):
        y = torch.full((2 * 48,), -7.0, device=DEV)
        desc_store_edge_kernel[(1,)](y, 2, n, 48, BM=2, BN=16)
        row = y[:48].cpu().tolist()
        written = [c for c in range(48) if row[c] == 1.0]
        out(f"descriptor.f32.store_at_col_32.N_{n}.columns_written (model: 32..{n - 1}) info", written)


@triton.jit
def desc_offset_kernel(x_ptr, o_ptr, M, N, LD, OFF1, BM: tl.constexpr, BN: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[LD, 1], block_shape=[BM, BN])
    tl.store(o_ptr + tl.arange(0, BN), tl.reshape(d.load([0, OFF1]), (BM * BN,)))


def child_offset(off1):
    """One f32 [1, 16] descriptor load at column `off1` of a 13 x 37 tensor (child process:
    a fault ends the CUDA context)."""
    triton.set_allocator(alloc)
    x = torch.arange(13 * 40, dtype=torch.float32, device=DEV)
    o = torch.full((16,), -1.0, device=DEV)
    desc_offset_kernel[(1,)](x, o, 13, 37, 40, off1, BM=1, BN=16)
    torch.cuda.synchronize()
    print(o.cpu().tolist())


def descriptor_offsets():
    """Descriptor loads at last-dimension offsets that are and are not multiples of 16 bytes."""
    for off1 in (4, -4, 5, -5, 33):
        r = subprocess.run([sys.executable, __file__, "--offset", str(off1)], capture_output=True, text=True,
                           timeout=120)
        got = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None
        if got is None:
            err = [ln for ln in r.stderr.splitlines() if "CUDA error:" in ln] or r.stderr.splitlines()
            out(f"descriptor.f32.load_at_col_{off1}", f"FAILED: {err[-1][:160] if err else r.returncode}")
        else:
            want = [float(c) if 0 <= c < 37 else 0.0 for c in range(off1, off1 + 16)]
            compare(f"descriptor.f32.load_at_col_{off1}", eval(got), want)


@triton.jit
def desc_bad_kernel(x_ptr, N, CASE: tl.constexpr):
    if CASE == 0:
        d = tl.make_tensor_descriptor(x_ptr, shape=[8, 8], strides=[8, 1], block_shape=[8, 2])
    elif CASE == 1:
        d = tl.make_tensor_descriptor(x_ptr, shape=[8, 8], strides=[1, 8], block_shape=[8, 8])
    else:
        d = tl.make_tensor_descriptor(x_ptr, shape=[8, 8], strides=[8, 1], block_shape=[8, 8])
        d.load([0])
    tl.store(x_ptr, 0.0)


def descriptor_errors():
    triton.set_allocator(alloc)
    x = torch.zeros(64, device=DEV)
    for case, name in enumerate(["block_last_dim_8_bytes", "last_stride_8", "offsets_rank_mismatch"]):
        try:
            desc_bad_kernel[(1,)](x, 8, CASE=case)
            out(f"descriptor.error.{name}", "ACCEPTED")
        except Exception as e:  # noqa: BLE001
            out(f"descriptor.error.{name}", f"refused {type(e).__name__}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--offset":
        child_offset(int(sys.argv[2]))
        sys.exit(0)
    out("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    out("device", torch.cuda.get_device_name(0))
    out("versions", f"torch {torch.__version__} triton {triton.__version__}")
    for f in (block_ptr_tiles, block_ptr_default_padding, block_ptr_offsets_advance_and_dtypes, block_ptr_errors,
              descriptor_tiles, descriptor_store_edge, descriptor_offsets, descriptor_errors):
        guarded(f)
