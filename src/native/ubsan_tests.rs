//! The printed C++ run under clang's undefined-behaviour sanitizer: each kernel's compiled
//! CPU program is linked into a small executable with `-fsanitize=undefined` and without
//! `-fwrapv` (the executor adds it; Metal and CUDA compile the same spellings without it),
//! run over its whole grid in a child process, and must finish without a sanitizer report
//! or a bounds failure. Skipped (failing under `TRITON_METAL_REQUIRE_EMU`) without clang.

use std::path::PathBuf;
use std::process::Command;

use crate::clang;
use crate::codegen::cpu;
use crate::dtype::DType::*;
use crate::emu::Emulator;
use crate::ir::{Kernel, ParamKind};
use crate::tl::{self, Tensor};

/// A launch argument of the sanitized run.
enum Arg {
    /// A buffer of this many elements of its parameter's dtype, zero-filled.
    Buf(usize),
    /// An integer scalar.
    Int(i64),
}

/// Calls `tm_run` over programs `[0, grid[0] * grid[1] * grid[2])` with the arguments the
/// test gives, then prints the failure record (`tm_ctx` in `cpu_runtime.h`).
const DRIVER: &str = r#"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
extern "C" void tm_run(void* const*, const int64_t*, const int64_t*, int64_t, int64_t, void*);
struct alignas(64) tm_status { int64_t f[16]; unsigned char sink[64]; };
int main() {
  static int64_t kinds[NPARAMS + 1];
  static int64_t scalars[NPARAMS];
  void* args[NPARAMS + 1];
  int64_t lens[NPARAMS + 1];
  const int64_t bytes[NPARAMS] = {BYTES};
  const int64_t values[NPARAMS] = {VALUES};
  for (int i = 0; i < NPARAMS; ++i) {
    kinds[i] = -1;
    if (bytes[i] < 0) {
      scalars[i] = values[i];
      args[i] = &scalars[i];
      lens[i] = 1;
    } else {
      args[i] = aligned_alloc(64, (size_t(bytes[i]) + 63) / 64 * 64 + 64);
      memset(args[i], 0, (size_t(bytes[i]) + 63) / 64 * 64 + 64);
      lens[i] = values[i];
    }
  }
  kinds[NPARAMS] = -1;
  args[NPARAMS] = kinds;
  lens[NPARAMS] = NPARAMS + 1;
  const int64_t grid[3] = {GRID};
  tm_status st;
  memset(&st, 0, sizeof st);
  tm_run(args, lens, grid, 0, grid[0] * grid[1] * grid[2], &st);
  printf("failed %lld offset %lld\n", (long long)st.f[0], (long long)st.f[4]);
  return 0;
}
"#;

/// Compiles `k`'s CPU program with the sanitizer and runs it over `grid` with `args` (one
/// per parameter); `false` when there is no clang (the test is skipped). Panics on a
/// sanitizer report, a crash or a bounds failure, quoting the program.
fn sanitized(k: &Kernel, grid: [i64; 3], args: &[Arg]) -> bool {
    if !Emulator::should_run("undefined-behaviour sanitizer").expect("clang check") {
        return false;
    }
    let Some(cxx) = clang::clang() else {
        return false;
    };
    assert_eq!(args.len(), k.params.len(), "one argument per parameter");
    let prog = cpu::compile(k, false).expect("prints");
    let (mut bytes, mut values) = (Vec::new(), Vec::new());
    for (p, a) in k.params.iter().zip(args) {
        match (p.kind, a) {
            (ParamKind::Ptr(dt), Arg::Buf(n)) => {
                bytes.push((n * dt.size_bytes()).to_string());
                values.push(n.to_string());
            }
            (ParamKind::Scalar(_), Arg::Int(v)) => {
                bytes.push("-1".into());
                values.push(format!("int64_t({:#x}ULL)", *v as u64));
            }
            _ => panic!("argument of the wrong kind for `{}`", p.name),
        }
    }
    let driver = DRIVER
        .replace("NPARAMS", &k.params.len().to_string())
        .replace("BYTES", &bytes.join(", "))
        .replace("VALUES", &values.join(", "))
        .replace("GRID", &grid.map(|g| g.to_string()).join(", "));
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tm_ubsan_{}_{}", std::process::id(), k.name));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (src, main, exe) = (
        dir.join("kernel.cpp"),
        dir.join("driver.cpp"),
        dir.join("run"),
    );
    std::fs::write(&src, &prog.source).expect("write kernel");
    std::fs::write(&main, driver).expect("write driver");
    let flags = super::FLAGS
        .iter()
        .chain(super::VECTOR_MATH)
        .filter(|f| !matches!(**f, "-fwrapv" | "-shared" | "-fPIC"));
    let out = Command::new(&cxx.path)
        .args(flags)
        .args(["-fsanitize=undefined", "-fno-sanitize-recover=all"])
        .arg(&src)
        .arg(&main)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("runs clang");
    assert!(
        out.status.success(),
        "`{}` does not compile with the sanitizer:\n{}",
        k.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("runs the program");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    let body = prog.source.split("#line 1 \"kernel.cpp\"\n").nth(1);
    assert!(
        run.status.success() && !stderr.contains("runtime error"),
        "`{}` has undefined behaviour ({}):\n{stderr}\n{}",
        k.name,
        run.status,
        body.unwrap_or_default()
    );
    assert!(
        stdout.contains("failed 0 "),
        "`{}` failed a bounds check: {stdout}",
        k.name
    );
    let _ = std::fs::remove_dir_all(&dir);
    true
}

/// Lanes of `x` that `mask` keeps at `offs + start`; the others `far` elements away, so that
/// adding `by` to their pointers leaves the range of the offsets (`dt`: 32 or 64 bits).
/// Each iteration reads through the pointers after one more step of `by` (the first one
/// before the loop).
fn far_lanes(dt: crate::DType) -> Kernel {
    let m = std::collections::BTreeMap::new();
    tl::build("far_lanes", &m, |k| {
        let (x, out) = (k.ptr(F32, "x"), k.ptr(F32, "out"));
        let n = k.scalar(I32, "n");
        let start = k.scalar(dt, "start");
        let far = k.scalar(dt, "far");
        let by = k.scalar(dt, "by");
        let iters = k.scalar(I32, "iters");
        let offs = tl::arange(0, 64);
        let mask = offs.lt(n);
        let lane = tl::where_(mask, offs + start, offs + far);
        let p: Tensor = (x + lane) + by;
        let init: (Tensor, Tensor) = (tl::zeros([64], F32), p);
        let (acc, _) = tl::range(0, iters, 1).fold(init, |_, (acc, p)| {
            let v = tl::load(p).mask(mask).other(0.0);
            (acc + v, p + by)
        });
        tl::store(out + offs, acc).mask(mask);
    })
    .expect("builds")
}

#[test]
fn pointer_offsets_past_the_offset_range_in_masked_lanes_are_defined() {
    for (dt, max, min) in [
        (I32, i32::MAX as i64, i32::MIN as i64),
        (I64, i64::MAX, i64::MIN),
    ] {
        let k = far_lanes(dt);
        // Above the maximum, then below the minimum.
        for (start, far, by) in [(0, max - 40, 50), (200, min + 40, -50)] {
            let args = [
                Arg::Buf(256),
                Arg::Buf(64),
                Arg::Int(10),
                Arg::Int(start),
                Arg::Int(far),
                Arg::Int(by),
                Arg::Int(3),
            ];
            if !sanitized(&k, [1, 1, 1], &args) {
                return;
            }
        }
    }
}

/// The tutorial matmul as the CPU stage prints it (pointer blocks carried as start plus
/// shift, B's rows checked once and packed, C stored by rows), on ragged sizes with masked
/// tails and rows of B wrapping inside a block.
#[test]
fn the_tutorial_matmul_as_printed_for_the_cpu_is_defined() {
    let cx: std::collections::BTreeMap<String, i64> = [("BM", 16), ("BN", 16), ("BK", 16)]
        .map(|(n, v)| (n.to_string(), v))
        .into_iter()
        .collect();
    let k = tl::build(
        "tutorial_matmul",
        &cx,
        crate::codegen::cpu_plan_tests::tutorial_matmul,
    )
    .expect("builds");
    let (m, n, kk) = (37i64, 48i64, 40i64);
    let args = [
        Arg::Buf((m * kk) as usize),
        Arg::Buf((kk * n) as usize),
        Arg::Buf((m * n) as usize),
        Arg::Int(m),
        Arg::Int(n),
        Arg::Int(kk),
        Arg::Int(kk),
        Arg::Int(n),
        Arg::Int(n),
        Arg::Int(5),
        Arg::Int(3),
    ];
    sanitized(&k, [(m + 15) / 16, n / 16, 1], &args);
}

/// Row statistics in loops over masked column blocks (the masks unswitched, first
/// iterations peeled) and tiles of rows `stride` apart copied by rows: ragged sizes.
#[test]
fn row_loops_and_tiles_as_printed_for_the_cpu_are_defined() {
    use crate::codegen::cpu_plan_tests::{row_stats, tile};
    let cx = |v: &[(&str, i64)]| -> std::collections::BTreeMap<String, i64> {
        v.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    };
    let k = tl::build("row_stats", &cx(&[("BLOCK", 128)]), row_stats).expect("builds");
    let (rows, n) = (5, 300);
    let args = [
        Arg::Buf(rows * n),
        Arg::Buf(rows * n),
        Arg::Buf(rows),
        Arg::Buf(rows),
        Arg::Int(n as i64),
    ];
    if !sanitized(&k, [rows as i64, 1, 1], &args) {
        return;
    }
    let k = tl::build("tile", &cx(&[("BM", 8), ("BN", 32)]), tile).expect("builds");
    let (m, n, stride) = (13, 29, 40);
    let args = [
        Arg::Buf(m * stride),
        Arg::Buf(m * n),
        Arg::Buf(m),
        Arg::Int(m as i64),
        Arg::Int(n as i64),
        Arg::Int(stride as i64),
    ];
    sanitized(&k, [2, 1, 1], &args);
}
