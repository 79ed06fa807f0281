//! Finds (or installs) MLX 0.32.4, compiles the C++ bridge in `cpp/` and links libmlx.
//!
//! Where MLX comes from, in order:
//! 1. `MLX_DIR`: a wheel-style `mlx/` folder holding `include/` and `lib/` (e.g. an
//!    `mlx-cuda-13` install for feature `cuda`).
//! 2. Otherwise the pinned wheel (`mlx-cpu==0.32.4` on Linux, `mlx-metal==0.32.4` on macOS)
//!    is installed once with `python3 -m pip install --target` into a cache folder shared by
//!    all builds: `$TRITON_METAL_MLX_CACHE`, else `$XDG_CACHE_HOME/triton-metal`, else
//!    `$HOME/.cache/triton-metal`. Feature `cuda` builds against it too: mlx-cpu 0.32.4 has
//!    mlx-cuda-13 0.32.4's headers and exports `fast::cuda_kernel`, so the binary runs on an
//!    NVIDIA machine with MLX's CUDA libmlx.so first on `LD_LIBRARY_PATH`.
//!
//! The wheel's layout is kept whole (libmlx finds its BLAS through
//! `$ORIGIN/../../mlx_cpu.libs`), and a symlink to it is placed in `OUT_DIR` so that cargo
//! puts the library folder on the loader path for `cargo run`/`cargo test`. Test, example,
//! bench and binary targets of this package also get an rpath. Downstream crates read
//! `DEP_MLX_LIBDIR` in their build script and emit
//! `cargo:rustc-link-arg=-Wl,-rpath,<that dir>` for their own binaries.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const MLX_VERSION: &str = "0.32.4";

fn main() {
    for f in ["build.rs", "cpp", "src/ffi.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    for v in [
        "MLX_DIR",
        "TRITON_METAL_MLX_CACHE",
        "XDG_CACHE_HOME",
        "HOME",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if let Err(msg) = run() {
        // One clear message; cargo shows it instead of a backtrace.
        eprintln!("\n[triton-metal build] {msg}\n");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let cuda = env::var_os("CARGO_FEATURE_CUDA").is_some();
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);

    let mlx_dir = match env::var_os("MLX_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            check_mlx_dir(&dir)?;
            dir
        }
        None => install_wheel(&target_os)?,
    };

    // Link through a symlink inside OUT_DIR: cargo adds OUT_DIR search paths to the
    // loader path of `cargo run`/`cargo test`, and the symlink keeps the wheel's
    // relative layout for libmlx's own $ORIGIN rpath.
    let link = out_dir.join("mlx-root");
    let _ = std::fs::remove_file(&link);
    let lib_dir = match (mlx_dir.parent(), mlx_dir.file_name()) {
        (Some(root), Some(name)) if symlink_dir(root, &link).is_ok() => link.join(name).join("lib"),
        _ => mlx_dir.join("lib"),
    };
    let include_dir = mlx_dir.join("include");

    let mut build = cxx_build::bridge("src/ffi.rs");
    build
        .file("cpp/bridge.cpp")
        .include(&include_dir)
        .include("cpp")
        .std("c++20")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations");
    if target_os == "macos" {
        build.define("TRITON_METAL_HAS_METAL", "1");
    }
    if cuda {
        build.define("TRITON_METAL_HAS_CUDA", "1");
    }
    build.compile("triton_metal_bridge");

    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlx");
    let real_lib = mlx_dir.join("lib");
    // Applies to every binary this package links (tests, examples, benches, the CLI).
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", real_lib.display());
    // Published to dependents as DEP_MLX_LIBDIR / DEP_MLX_INCLUDE.
    println!("cargo:LIBDIR={}", real_lib.display());
    println!("cargo:INCLUDE={}", include_dir.display());
    println!(
        "cargo:rustc-env=TRITON_METAL_MLX_LIBDIR={}",
        real_lib.display()
    );
    Ok(())
}

fn check_mlx_dir(dir: &Path) -> Result<(), String> {
    let header = dir.join("include/mlx/mlx.h");
    let has_lib = ["libmlx.so", "libmlx.dylib"]
        .iter()
        .any(|l| dir.join("lib").join(l).exists());
    if !header.exists() || !has_lib {
        return Err(format!(
            "MLX_DIR={} is not an MLX install: expected include/mlx/mlx.h and lib/libmlx.so \
             (or .dylib) inside it (the `mlx/` folder of an MLX {MLX_VERSION} wheel).",
            dir.display()
        ));
    }
    Ok(())
}

fn cache_root() -> PathBuf {
    if let Some(d) = env::var_os("TRITON_METAL_MLX_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("triton-metal");
    }
    if let Some(h) = env::var_os("HOME") {
        return PathBuf::from(h).join(".cache/triton-metal");
    }
    env::temp_dir().join("triton-metal-cache")
}

fn install_wheel(target_os: &str) -> Result<PathBuf, String> {
    let package = match target_os {
        "linux" => "mlx-cpu",
        "macos" => "mlx-metal",
        other => {
            return Err(format!(
                "no pinned MLX wheel for target OS `{other}`; set MLX_DIR to an MLX \
                 {MLX_VERSION} install (a folder with include/ and lib/)."
            ))
        }
    };
    let root = cache_root();
    let dest = root.join(format!("{package}-{MLX_VERSION}"));
    let mlx_dir = dest.join("mlx");
    if check_mlx_dir(&mlx_dir).is_ok() {
        return Ok(mlx_dir);
    }
    std::fs::create_dir_all(&root)
        .map_err(|e| format!("cannot create the MLX cache folder {}: {e}", root.display()))?;
    // Install into a private folder and rename: concurrent builds never see half a wheel.
    let tmp = root.join(format!(".{package}-{MLX_VERSION}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let spec = format!("{package}=={MLX_VERSION}");
    let output = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--no-deps", "--only-binary=:all:", "--target"])
        .arg(&tmp)
        .arg(&spec)
        .output();
    let fail = |why: String| {
        let _ = std::fs::remove_dir_all(&tmp);
        format!(
            "could not install MLX ({spec}) with `python3 -m pip install --target {}`: {why}\n\
             Install python3 with pip and network access to PyPI, or set MLX_DIR to the \
             `mlx/` folder of an MLX {MLX_VERSION} wheel (holding include/ and lib/).",
            dest.display()
        )
    };
    match output {
        Err(e) => return Err(fail(format!("python3 could not be run ({e})"))),
        Ok(o) if !o.status.success() => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last: Vec<&str> = stderr.lines().rev().take(6).collect();
            let last: Vec<&str> = last.into_iter().rev().collect();
            return Err(fail(last.join("\n")));
        }
        Ok(_) => {}
    }
    check_mlx_dir(&tmp.join("mlx")).map_err(fail)?;
    if std::fs::rename(&tmp, &dest).is_err() {
        // Another build won the race; use its copy.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    check_mlx_dir(&mlx_dir)?;
    Ok(mlx_dir)
}

#[cfg(unix)]
fn symlink_dir(src: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(src, link)
}

#[cfg(not(unix))]
fn symlink_dir(_src: &Path, _link: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("symlinks unsupported"))
}
