//! Hostile input to the runtime, one child process per case where a crash is possible: each
//! case must end with a clear error (or work), never a signal, a panic or a hang. Cases
//! re-run this test binary with `TM_HOSTILE_CASE` naming the case (the CLI's cases are in
//! `cli_hostile.rs`).

use std::process::{Command, Output};

use triton_metal::runtime::{cdiv, grid, out, out_like, Target};
use triton_metal::tl::{self, JitKernel};
use triton_metal::{mlx, Array, DType::F32, DType::I32};

const CASE_ENV: &str = "TM_HOSTILE_CASE";

/// 4e10 bytes: more than any machine these tests run on, and a size MLX's own allocator
/// cannot serve (it returns a null buffer that its kernels then write through).
const HUGE: [usize; 2] = [100_000, 100_000];

fn add_kernel() -> JitKernel {
    tl::jit("hostile_add", |k| {
        let (x, y, o) = (k.ptr(F32, "x"), k.ptr(F32, "y"), k.ptr(F32, "out"));
        let n = k.scalar(I32, "n");
        let b = k.constexpr("BLOCK");
        let offs = tl::program_id(0) * b + tl::arange(0, b);
        let m = offs.lt(n);
        tl::store(
            o + offs,
            tl::load(x + offs).mask(m) + tl::load(y + offs).mask(m),
        )
        .mask(m);
    })
    .unwrap()
}

fn add(x: &Array, target: Target) -> triton_metal::Result<Vec<Array>> {
    let n = x.size();
    add_kernel()
        .launch()
        .grid(grid(move |m| [cdiv(n, m["BLOCK"]).max(1)]))
        .args((x, x, out_like(x), n as i32))
        .constexpr("BLOCK", 64)
        .target(target)
        .run()
}

/// Runs one case in this process; the outcome is printed for the parent to check.
fn run_case(name: &str) -> Result<String, String> {
    let e = |r: triton_metal::Error| r.to_string();
    match name {
        "zeros" => mlx::zeros(&HUGE, F32).map_err(e)?.eval().map_err(e)?,
        "full_i64" => mlx::full(&HUGE, 1.0, triton_metal::DType::I64)
            .map_err(e)?
            .eval()
            .map_err(e)?,
        "uniform" => mlx::random::uniform(&HUGE, F32, 0.0, 1.0, 1)
            .map_err(e)?
            .eval()
            .map_err(e)?,
        "normal" => mlx::random::normal(&HUGE, F32, 1)
            .map_err(e)?
            .eval()
            .map_err(e)?,
        "to_vec" => {
            mlx::zeros(&HUGE, F32)
                .map_err(e)?
                .to_vec::<f32>()
                .map_err(e)?;
        }
        "eval_all" => {
            let a = mlx::zeros(&HUGE, F32).map_err(e)?;
            let b = mlx::zeros(&[4], F32).map_err(e)?;
            Array::eval_all(&[&b, &a]).map_err(e)?
        }
        "derived" => {
            // A small result of a huge intermediate.
            let a = mlx::zeros(&HUGE, F32).map_err(e)?;
            mlx::sum(&a, None, false).map_err(e)?.eval().map_err(e)?
        }
        "kernel_cpu" | "kernel_compiled" | "kernel_derived" => {
            let t = if name == "kernel_compiled" {
                Target::CpuCompiled
            } else {
                Target::Cpu
            };
            let x = mlx::zeros(&HUGE, F32).map_err(e)?;
            // Either the array itself, or a small lazy array computed from it.
            let x = if name == "kernel_derived" {
                mlx::sum(&x, Some(&[0]), false).map_err(e)?
            } else {
                x
            };
            add(&x, t).map_err(e)?[0].eval().map_err(e)?
        }
        "zero_size_cpu" | "zero_size_compiled" => {
            let t = if name == "zero_size_cpu" {
                Target::Cpu
            } else {
                Target::CpuCompiled
            };
            let x = Array::from_slice::<f32>(&[], &[0]).map_err(e)?;
            let out = add(&x, t).map_err(e)?;
            let v = out[0].to_vec::<f32>().map_err(e)?;
            return Ok(format!("empty output of {} elements", v.len()));
        }
        "cache_dir_file" | "cache_dir_open" | "kernel_cache_open" => {
            let x = Array::from_slice(&[1.0f32, 2.0], &[2]).map_err(e)?;
            add(&x, Target::CpuCompiled).map_err(e)?[0]
                .eval()
                .map_err(e)?
        }
        "eight_outputs" | "eight_outputs_compiled" | "eight_outputs_emulated" => {
            let t = match name {
                "eight_outputs" => Target::Cpu,
                "eight_outputs_compiled" => Target::CpuCompiled,
                _ => Target::Emulated(triton_metal::emu::LaneOrder::Forward),
            };
            // Each output fits in memory; the eight together do not.
            let each = elems_of(machine_bytes() / 6);
            let k = tl::jit("eight", |k| {
                let ys: Vec<_> = (0..8).map(|i| k.ptr(F32, &format!("y{i}"))).collect();
                for y in ys {
                    tl::store(y + tl::arange(0, 16), tl::zeros([16], F32));
                }
            })
            .map_err(e)?;
            let mut l = k.launch().grid([1]).target(t);
            for _ in 0..8 {
                l = l.arg(out(&each, F32));
            }
            l.run().map_err(e)?[0].eval().map_err(e)?
        }
        "lazy_input_and_output" => {
            // A lazy input and the output, each 70% of the machine's memory.
            let x = mlx::zeros(&elems_of(machine_bytes() / 10 * 7), F32).map_err(e)?;
            add(&x, Target::Cpu).map_err(e)?[0].eval().map_err(e)?
        }
        "lazy_mlx_sum" => {
            // Two lazy arrays of 60% each, added: MLX alone, caught at eval.
            let a = mlx::zeros(&elems_of(machine_bytes() / 10 * 6), F32).map_err(e)?;
            let b = mlx::zeros(&elems_of(machine_bytes() / 10 * 6), F32).map_err(e)?;
            mlx::add(&a, &b).map_err(e)?.eval().map_err(e)?
        }
        "to_vec_no_memory_left" => {
            // An array MLX holds, copied out with too little address space left for the
            // copy: the allocation fails, which must be an error, not an abort.
            let x = mlx::zeros(&[64 << 20], F32).map_err(e)?;
            x.eval().map_err(e)?;
            limit_address_space(64 << 20);
            let v = x.to_vec::<f32>().map_err(e)?;
            return Ok(format!("copied {} elements", v.len()));
        }
        other => return Err(format!("unknown case {other}")),
    }
    Ok("no error".into())
}

/// Physical memory of this machine in bytes.
fn machine_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGE_SIZE),
        )
    };
    pages as usize * page as usize
}

/// A 2-D shape of f32 elements of about `bytes` bytes (each dimension fits MLX's `int`).
fn elems_of(bytes: usize) -> [usize; 2] {
    [bytes / 4 / 65536, 65536]
}

/// Lets this process map at most `extra` more bytes of address space than it has now.
fn limit_address_space(extra: usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let lim = libc::rlimit {
        rlim_cur: (kib * 1024 + extra) as libc::rlim_t,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
}

/// The child's side: runs the case named by `TM_HOSTILE_CASE`, if any.
#[test]
fn hostile_case_child() {
    let Ok(name) = std::env::var(CASE_ENV) else {
        return;
    };
    match run_case(&name) {
        Ok(what) => println!("OUTCOME ok: {what}"),
        Err(msg) => println!("OUTCOME err: {msg}"),
    }
}

fn child(name: &str, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "hostile_case_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CASE_ENV, name);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Runs a case in a child process and returns its outcome line; fails on a signal or panic.
fn outcome(name: &str, env: &[(&str, &str)]) -> String {
    let o = child(name, env);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "case {name} did not exit cleanly ({:?}):\n{out}\n{err}",
        o.status
    );
    out.lines()
        .find_map(|l| l.split_once("OUTCOME ").map(|(_, o)| o))
        .unwrap_or_else(|| panic!("case {name}: no outcome:\n{out}\n{err}"))
        .to_string()
}

fn emu_ok(name: &str) -> bool {
    triton_metal::emu::Emulator::should_run(name).unwrap()
}

#[test]
fn oversized_mlx_arrays_are_errors_not_crashes() {
    for case in [
        "zeros", "full_i64", "uniform", "normal", "to_vec", "eval_all", "derived",
    ] {
        let got = outcome(case, &[]);
        assert!(
            got.starts_with("err:") && got.contains("100000, 100000") && got.contains("bytes"),
            "{case}: {got}"
        );
    }
}

#[test]
fn kernels_on_oversized_lazy_inputs_are_errors_not_crashes() {
    let mut cases = vec!["kernel_cpu", "kernel_derived"];
    if emu_ok("kernels_on_oversized_lazy_inputs_are_errors_not_crashes") {
        cases.push("kernel_compiled");
    }
    for case in cases {
        let got = outcome(case, &[]);
        assert!(got.starts_with("err:"), "{case}: {got}");
    }
}

#[test]
fn zero_size_arrays_launch_and_give_empty_outputs() {
    let mut cases = vec!["zero_size_cpu"];
    if emu_ok("zero_size_arrays_launch_and_give_empty_outputs") {
        cases.push("zero_size_compiled");
    }
    for case in cases {
        let got = outcome(case, &[]);
        assert_eq!(got, "ok: empty output of 0 elements", "{case}");
    }
}

#[cfg(unix)]
#[test]
fn unusable_cache_directories_are_named_in_the_error() {
    use std::os::unix::fs::PermissionsExt;
    if !emu_ok("unusable_cache_directories_are_named_in_the_error") {
        return;
    }
    let base = std::env::temp_dir().join(format!("tm-hostile-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    // A regular file where the cache directory should be.
    let file = base.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let got = outcome(
        "cache_dir_file",
        &[("TRITON_METAL_CACHE_DIR", file.to_str().unwrap())],
    );
    assert!(
        got.starts_with("err:") && got.contains("TRITON_METAL_CACHE_DIR") && got.contains("a-file"),
        "{got}"
    );
    // A directory everyone can write to: someone else could plant a kernel there.
    let open = base.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let got = outcome(
        "cache_dir_open",
        &[("TRITON_METAL_CACHE_DIR", open.to_str().unwrap())],
    );
    assert!(
        got.starts_with("err:") && got.contains("refusing") && got.contains("open"),
        "{got}"
    );
    let got = outcome(
        "kernel_cache_open",
        &[("TRITON_METAL_EMU_CACHE", open.to_str().unwrap())],
    );
    assert!(
        got.starts_with("err:")
            && got.contains("TRITON_METAL_EMU_CACHE")
            && got.contains("mode 777"),
        "{got}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// Launches and evaluations whose arrays each fit in memory but together do not are errors
/// naming the kernel and its arguments, before anything is allocated.
#[cfg(target_os = "linux")]
#[test]
fn launches_needing_more_memory_than_available_are_errors() {
    let mut cases = vec!["eight_outputs"];
    if emu_ok("launches_needing_more_memory_than_available_are_errors") {
        cases.extend(["eight_outputs_compiled", "eight_outputs_emulated"]);
    }
    for case in cases {
        let got = outcome(case, &[]);
        assert!(
            got.starts_with("err:")
                && got.contains("kernel `eight`")
                && got.contains("output `y0`")
                && got.contains("at once")
                && got.contains("4 more")
                && got.contains("MiB of memory available"),
            "{case}: {got}"
        );
    }
    let got = outcome("lazy_input_and_output", &[]);
    assert!(
        got.starts_with("err:")
            && got.contains("kernel `hostile_add`")
            && got.contains("input `x` (not computed yet)")
            && got.contains("output `out`"),
        "{got}"
    );
    let got = outcome("lazy_mlx_sum", &[]);
    assert!(
        got.starts_with("err:") && got.contains("at once") && got.contains("available"),
        "{got}"
    );
}

/// Copying an array out of MLX with too little memory left is an error, not an abort.
#[cfg(target_os = "linux")]
#[test]
fn copying_out_without_memory_is_an_error() {
    let got = outcome("to_vec_no_memory_left", &[]);
    assert!(
        got.starts_with("err:") && got.contains("unable to allocate 268435456 bytes"),
        "{got}"
    );
}
