"""CPU peers of `cargo bench --bench executor`: NumPy (OpenBLAS for matmul) and XLA:CPU
(`jax.jit`) on the same five cases, shapes and dtypes, on the same machine.

Run it back to back with the Rust bench, so every ratio is a same-run ratio:

    python3 -m pip install numpy "jax[cpu]"
    python3 benches/cpu_peers.py && cargo bench --bench executor
    python3 benches/cpu_peers.py --only matmul && cargo bench --bench executor -- matmul_1024

Each case prints the median of `--reps` timed calls after warm-up (outputs are fresh
arrays, as a kernel's outputs are), with throughput in the units criterion prints for the
Rust side: GiB/s for the memory-bound cases (each input read once, each output written
once), GFLOP/s for matmul. Every peer's result is checked against a float64 NumPy
reference before it is timed.

On a machine other work shares, `--cpu-time` times with the process's CPU time instead
of the wall clock and prints the minimum and the median, the numbers to set beside
benches/cpu_matmul_ab.cpp's (one thread: `OPENBLAS_NUM_THREADS=1 ... --no-jax`):

    OPENBLAS_NUM_THREADS=1 python3 benches/cpu_peers.py --only matmul --no-jax --cpu-time
"""
import argparse
import statistics
import time

import numpy as np

GIB = float(1 << 30)


def timed(fn, reps, clock=time.perf_counter, warmup=3):
    """Seconds of `reps` calls of `fn` after `warmup` calls, each on `clock`."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def median_seconds(fn, reps, warmup=3):
    return statistics.median(timed(fn, reps, warmup=warmup))


def softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm_np(x, w, b, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def cases():
    rng = np.random.default_rng(0)
    u = lambda *shape: rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    n = 16 << 20
    x, y = u(n), u(n)
    m = u(4096, 4096)
    s = u(4096, 1024)
    w, b = np.ones(1024, np.float32), np.zeros(1024, np.float32)
    a, bm = u(1024, 1024), u(1024, 1024)
    return [
        dict(name="vector_add_16M_f32", bytes=3 * n * 4, args=(x, y),
             np=lambda x, y: x + y, tol=2.5e-7),
        dict(name="row_sum_4096x4096_f32", bytes=4096 * 4096 * 4 + 4096 * 4, args=(m,),
             np=lambda m: m.sum(axis=1), tol=1e-3),
        dict(name="softmax_4096x1024_f32", bytes=2 * 4096 * 1024 * 4, args=(s,),
             np=softmax_np, tol=1e-6),
        dict(name="layer_norm_4096x1024_f32", bytes=2 * 4096 * 1024 * 4, args=(s, w, b),
             np=layer_norm_np, tol=1e-4),
        dict(name="matmul_1024_f32", flops=2 * 1024 ** 3, args=(a, bm),
             np=lambda a, b: a @ b, tol=1e-3),
    ]


def jax_fns():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")

    def softmax(x):
        e = jnp.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def layer_norm(x, w, b, eps=1e-5):
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + eps) * w + b

    fns = {
        "vector_add_16M_f32": lambda x, y: x + y,
        "row_sum_4096x4096_f32": lambda m: m.sum(axis=1),
        "softmax_4096x1024_f32": softmax,
        "layer_norm_4096x1024_f32": layer_norm,
        "matmul_1024_f32": lambda a, b: a @ b,
    }
    return jax, {k: jax.jit(f) for k, f in fns.items()}


def rate(case, seconds):
    if "bytes" in case:
        return f"{case['bytes'] / seconds / GIB:7.2f} GiB/s"
    return f"{case['flops'] / seconds / 1e9:7.1f} GFLOP/s"


def check(name, peer, got, args, fn, tol):
    want = fn(*(a.astype(np.float64) for a in args))
    err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
    if not err <= tol:
        raise SystemExit(f"{peer} {name}: max error {err} above {tol}")
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-jax", action="store_true", help="NumPy only")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--cpu-time", action="store_true",
                    help="process CPU time, minimum and median (instead of wall-clock median)")
    opts = ap.parse_args()
    jax, jitted = (None, None) if opts.no_jax else jax_fns()
    print(f"numpy {np.__version__}" + (f", jax {jax.__version__}" if jax else ""))
    for c in cases():
        name, args = c["name"], c["args"]
        if opts.only not in name:
            continue
        check(name, "numpy", c["np"](*args), args, c["np"], c["tol"])
        if opts.cpu_time:
            ts = sorted(timed(lambda: c["np"](*args), opts.reps, clock=time.process_time))
            line = (f"{name:28} numpy CPU time min {ts[0] * 1e3:9.3f} ms"
                    f" median {statistics.median(ts) * 1e3:9.3f} ms {rate(c, ts[0])}")
            if jax:
                dev_args = [jax.device_put(a) for a in args]
                fn = jitted[name]
                check(name, "jax", fn(*dev_args).block_until_ready(), args, c["np"], c["tol"])
                ts = sorted(timed(lambda: fn(*dev_args).block_until_ready(), opts.reps,
                                  clock=time.process_time))
                line += (f" | jax.jit CPU time min {ts[0] * 1e3:9.3f} ms"
                         f" median {statistics.median(ts) * 1e3:9.3f} ms")
            print(line, flush=True)
            continue
        t_np = median_seconds(lambda: c["np"](*args), opts.reps)
        line = f"{name:28} numpy {t_np * 1e3:9.3f} ms {rate(c, t_np)}"
        if jax:
            dev_args = [jax.device_put(a) for a in args]
            fn = jitted[name]
            check(name, "jax", fn(*dev_args).block_until_ready(), args, c["np"], c["tol"])
            t_jax = median_seconds(lambda: fn(*dev_args).block_until_ready(), opts.reps)
            line += f" | jax.jit {t_jax * 1e3:9.3f} ms {rate(c, t_jax)}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
