//! `Config`: settings installed by the program win over the `TRITON_METAL_*` variables, and
//! with the environment turned off the variables are not read at all. Settings are per
//! process, so this file holds one test (its own process).

use triton_metal::opt::HardwareProfile;
use triton_metal::runtime::{cdiv, grid, out_like, Target};
use triton_metal::{tl, Array, Config, DType::F32};

fn double(x: &Array) -> triton_metal::Result<Vec<f32>> {
    let k = tl::jit("double", |k| {
        let (x_ptr, y_ptr) = (k.ptr(F32, "x_ptr"), k.ptr(F32, "y_ptr"));
        let n = k.scalar(triton_metal::DType::I32, "n");
        let offs = tl::program_id(0) * 64 + tl::arange(0, 64);
        let m = offs.lt(n);
        tl::store(y_ptr + offs, tl::load(x_ptr + offs).mask(m) * 2.0).mask(m);
    })?;
    let n = x.size();
    let out = k
        .launch()
        .grid(grid(move |_| [cdiv(n, 64)]))
        .args((x, out_like(x), n as i32))
        .run()?;
    out[0].to_vec()
}

#[test]
fn installed_settings_win_over_the_environment() {
    let x = Array::from_slice(&[1.0f32, -2.5, 3.0, 0.0, 7.0], &[5]).unwrap();

    // Nothing installed: the variables are read, and bad values are errors naming them.
    std::env::set_var("TRITON_METAL_TARGET", "no-such-target");
    std::env::set_var("TRITON_METAL_HW", "no-such-chip");
    let e = double(&x).unwrap_err().to_string();
    assert!(e.contains("TRITON_METAL_TARGET=no-such-target"), "{e}");
    let e = HardwareProfile::detect().unwrap_err().to_string();
    assert!(e.contains("TRITON_METAL_HW"), "{e}");

    // A hardware name no profile has is refused, and nothing is installed.
    let e = Config::new().hardware("m99-ultra").install().unwrap_err();
    assert!(e.to_string().contains("Config::hardware"), "{e}");

    Config::new()
        .target(Target::Cpu)
        .environment(false)
        .install()
        .unwrap();
    // The same launch now runs where the program said, and detection ignores the variable.
    assert_eq!(double(&x).unwrap(), [2.0, -5.0, 6.0, 0.0, 14.0]);
    HardwareProfile::detect().unwrap();

    // Fixed for the process.
    let e = Config::new().install().unwrap_err();
    assert!(e.to_string().contains("installed before"), "{e}");
}
