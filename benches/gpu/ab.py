"""A/B of generated-kernel folders on the NVIDIA machine, in one process: for each case of
`bench.py`, Triton's kernel, then each folder's kernel, alternated, every result checked
against PyTorch (max error printed).

Run from the repository root:

    ROUNDS=2 CASES=matmul python3 benches/gpu/ab.py OLD_DIR benches/gpu/generated

CASES keeps the cases whose name starts with it (all by default); ROUNDS repeats them.
"""
import sys, os
sys.path.insert(0, "benches/gpu")
import bench
folders = sys.argv[1:]
gens = {f: bench.Generated(f) for f in folders}
pre = os.environ.get("CASES", "")
cs = [c for c in bench.cases() if c["case"].startswith(pre)]
for rnd in range(int(os.environ.get("ROUNDS", "2"))):
    for c in cs:
        ref = c["ref"]()
        t = bench.time_ms(c["triton"], reps=50)
        rate = lambda ms: c["flops"] / ms / 1e9 if "flops" in c else c["bytes"] / ms / 1e6
        line = [c["case"], f"triton {rate(t):.1f}"]
        for f, g in gens.items():
            if not g.has(c["case"]):
                line.append(f"{os.path.basename(f)} -")
                continue
            run = g.launcher(c["case"], c["tensors"])
            ms = bench.time_ms(run, reps=50)
            err = (c["tensors"][c["g_out"]].float() - ref.float()).abs().max().item()
            line.append(f"{os.path.basename(f)} {rate(ms):.1f} (err {err:.1e})")
        print(" | ".join(line), flush=True)
