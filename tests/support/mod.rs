//! What several integration tests share: the targets a test runs on here, NVRTC, and
//! running one launch on all of them.

#![allow(dead_code)]

use triton_metal::codegen::nvrtc::{Nvrtc, NVRTC_DIR_ENV};
use triton_metal::emu::{Emulator, LaneOrder};
use triton_metal::runtime::{Launch, Target};
use triton_metal::tl::JitKernel;
use triton_metal::Array;

/// The targets a test runs on here: the interpreter, and (with clang) the compiled CPU
/// executor and the Metal emulator in both lane orders.
pub fn targets(test: &str) -> Vec<Target> {
    let mut t = vec![Target::Cpu];
    if Emulator::should_run(test).unwrap() {
        t.extend([
            Target::CpuCompiled,
            Target::Emulated(LaneOrder::Forward),
            Target::Emulated(LaneOrder::Reverse),
        ]);
    }
    t
}

/// NVRTC from `TRITON_METAL_NVRTC_DIR` or `target/nvrtc`, loaded once per test binary;
/// `None` (after saying so) when it is missing, a failure when
/// `TRITON_METAL_REQUIRE_NVRTC=1`.
pub fn nvrtc() -> Option<&'static Nvrtc> {
    static N: std::sync::OnceLock<Option<Nvrtc>> = std::sync::OnceLock::new();
    N.get_or_init(|| {
        let found = match std::env::var_os(NVRTC_DIR_ENV) {
            Some(_) => Nvrtc::from_env(),
            None => Nvrtc::from_dir(
                &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/nvrtc"),
            ),
        };
        match found {
            Ok(n) => Some(n),
            Err(e) => {
                assert!(
                    std::env::var("TRITON_METAL_REQUIRE_NVRTC").as_deref() != Ok("1"),
                    "TRITON_METAL_REQUIRE_NVRTC=1 but NVRTC is unavailable: {e}"
                );
                println!("skipping NVRTC compiles: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// Compiles the CUDA `launch` would run with NVRTC for sm_90 (where NVRTC is available).
pub fn nvrtc_compiles(launch: &Launch<'_>) {
    if let Some(n) = nvrtc() {
        let p = launch.cuda().unwrap();
        if let Err(e) = n.compile(
            &format!("{}.cu", p.name),
            &p.standalone(),
            &p.nvrtc_arch("compute_90"),
        ) {
            panic!("NVRTC rejected `{}`: {e}\n{}", p.name, p.standalone());
        }
    }
}

/// Generates the CUDA `launch` would run and compiles it with NVRTC for sm_80 (where NVRTC
/// is available): `Err` is the code generator's refusal; NVRTC rejecting the code panics.
pub fn cuda_compiles(launch: &Launch<'_>) -> triton_metal::Result<()> {
    let p = launch.cuda()?;
    if let Some(n) = nvrtc() {
        if let Err(e) = n.compile(&format!("{}.cu", p.name), &p.standalone(), "compute_80") {
            panic!("NVRTC rejected `{}`: {e}\n{}", p.name, p.standalone());
        }
    }
    Ok(())
}

/// Runs the launch `setup` configures on every target of [`targets`], after compiling its
/// CUDA ([`cuda_compiles`]); each target's outputs. Any target failing panics.
pub fn every_target(
    k: &JitKernel,
    setup: impl for<'a> Fn(Launch<'a>) -> Launch<'a>,
) -> Vec<(Target, Vec<Array>)> {
    cuda_compiles(&setup(k.launch())).unwrap_or_else(|e| panic!("{}: CUDA: {e}", k.name()));
    targets(k.name())
        .into_iter()
        .map(|t| {
            let outs = setup(k.launch())
                .target(t)
                .run()
                .unwrap_or_else(|e| panic!("{} on {t:?}: {e}", k.name()));
            (t, outs)
        })
        .collect()
}
