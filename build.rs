//! Finds (or installs) MLX 0.32.4, compiles the C++ bridge in `cpp/` and links libmlx.
//!
//! Where MLX comes from, in order:
//! 1. `DOCS_RS` set (docs.rs, or any documentation-only build): no MLX at all. The bridge is
//!    not compiled and libmlx is not linked, so `cargo doc` and `cargo check` work offline
//!    and without MLX; binaries built this way do not link.
//! 2. `MLX_DIR`: a wheel-style `mlx/` folder holding `include/` and `lib/` (e.g. an
//!    `mlx-cuda-13` install for feature `cuda`, or an install made offline).
//! 3. Otherwise the pinned wheel (`mlx-cpu==0.32.4` on Linux, `mlx-metal==0.32.4` on macOS)
//!    is downloaded once with `python3 -m pip download`, checked against the SHA-256 hashes
//!    pinned in `build/wheel.rs` (a mismatch stops the build), and unpacked with
//!    `python3 -m pip install --no-index --target` into a cache folder shared by all builds:
//!    `$TRITON_METAL_MLX_CACHE`, else `$XDG_CACHE_HOME/triton-metal`, else
//!    `$HOME/.cache/triton-metal`, else (no home folder) `OUT_DIR`. Feature `cuda` builds
//!    against it too: mlx-cpu 0.32.4 has mlx-cuda-13 0.32.4's headers and exports
//!    `fast::cuda_kernel`, so the binary runs on an NVIDIA machine with MLX's CUDA libmlx.so
//!    first on `LD_LIBRARY_PATH`.
//!
//! Nothing is written outside that cache folder and `OUT_DIR`. The wheel's layout is kept
//! whole (libmlx finds its BLAS through `$ORIGIN/../../mlx_cpu.libs`), and a symlink to it is
//! placed in `OUT_DIR` so that cargo puts the library folder on the loader path for
//! `cargo run`/`cargo test`. Test, example, bench and binary targets of this package also get
//! an rpath, unless the library sits under the system's temporary folder (a path anyone may
//! create is never baked into a binary). Downstream crates read `DEP_MLX_LIBDIR` in their
//! build script and emit `cargo:rustc-link-arg=-Wl,-rpath,<that dir>` for their own binaries.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/wheel.rs"]
mod wheel;

use wheel::MLX_VERSION;

fn main() {
    for f in ["build.rs", "build", "cpp", "src/ffi.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    for v in [
        "DOCS_RS",
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
    if env::var_os("DOCS_RS").is_some() {
        println!(
            "cargo:warning=DOCS_RS is set: documentation-only build, MLX is neither installed \
             nor linked (binaries of this build do not link)"
        );
        return Ok(());
    }
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let cuda = env::var_os("CARGO_FEATURE_CUDA").is_some();
    let out_dir = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);

    let mlx_dir = match env::var_os("MLX_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            check_mlx_dir(&dir)?;
            dir
        }
        None => install_wheel(&target_os, &target_arch, &out_dir)?,
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
    let real_lib = real_lib.canonicalize().unwrap_or(real_lib);
    if wheel::under_temp_dir(&real_lib) {
        println!(
            "cargo:warning=MLX's library folder {} is under the temporary folder: no rpath is \
             baked into binaries (cargo run/test still find it; elsewhere set LD_LIBRARY_PATH)",
            real_lib.display()
        );
    } else {
        // Applies to every binary this package links (tests, examples, benches, the CLI).
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", real_lib.display());
    }
    // Published to dependents as DEP_MLX_LIBDIR / DEP_MLX_INCLUDE / DEP_MLX_VERSION.
    println!("cargo:LIBDIR={}", real_lib.display());
    println!("cargo:INCLUDE={}", include_dir.display());
    println!("cargo:VERSION={MLX_VERSION}");
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

/// What to do without network access, spelled out for `package`.
fn offline_help(package: &str, pinned: &[(&str, &str, &str)]) -> String {
    let hashes: Vec<String> = pinned
        .iter()
        .map(|p| format!("  {}  {}", p.2, p.1))
        .collect();
    format!(
        "To build offline: on a machine with network access run\n  \
         python3 -m pip download --no-deps --only-binary=:all: {package}=={MLX_VERSION}\n\
         check the wheel with `sha256sum` against the pinned hashes\n{}\n\
         then, here: python3 -m pip install --no-deps --no-index --target DIR <the .whl file>\n\
         and build with MLX_DIR=DIR/mlx (DIR/mlx holds include/ and lib/).",
        hashes.join("\n")
    )
}

fn install_wheel(target_os: &str, target_arch: &str, out_dir: &Path) -> Result<PathBuf, String> {
    let Some(package) = wheel::package_for(target_os) else {
        return Err(format!(
            "no pinned MLX wheel for target OS `{target_os}`; set MLX_DIR to an MLX \
             {MLX_VERSION} install (a folder with include/ and lib/)."
        ));
    };
    let pinned = wheel::candidates(package, target_arch);
    if pinned.is_empty() {
        return Err(format!(
            "no pinned {package} {MLX_VERSION} wheel for target architecture `{target_arch}`; \
             set MLX_DIR to an MLX {MLX_VERSION} install (a folder with include/ and lib/)."
        ));
    }
    let root = wheel::cache_root(|v| env::var(v).ok(), out_dir);
    for (_, file, sha) in &pinned {
        let mlx_dir = root.join(wheel::install_dir_name(file, sha)).join("mlx");
        if check_mlx_dir(&mlx_dir).is_ok() {
            return Ok(mlx_dir);
        }
    }
    std::fs::create_dir_all(&root)
        .map_err(|e| format!("cannot create the MLX cache folder {}: {e}", root.display()))?;
    // Download and unpack into a private folder, then rename: concurrent builds never see
    // half a wheel, and nothing unchecked ever sits under a name that is reused.
    let tmp = root.join(format!(".{package}-{MLX_VERSION}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let result = download_and_unpack(package, &pinned, &root, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn download_and_unpack(
    package: &str,
    pinned: &[(&str, &str, &str)],
    root: &Path,
    tmp: &Path,
) -> Result<PathBuf, String> {
    let spec = format!("{package}=={MLX_VERSION}");
    let download = tmp.join("download");
    pip(
        &["download", "--no-deps", "--only-binary=:all:", "--dest"],
        &download,
        &spec,
    )
    .map_err(|why| {
        format!(
            "could not download MLX ({spec}) with `python3 -m pip download`: {why}\n{}",
            offline_help(package, pinned)
        )
    })?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&download)
        .map_err(|e| format!("cannot read {}: {e}", download.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    let [wheel_file] = wheels.as_slice() else {
        return Err(format!(
            "`pip download {spec}` left {} wheel files in {}, expected one",
            wheels.len(),
            download.display()
        ));
    };
    let sha = wheel::verify_wheel(package, wheel_file, pinned).map_err(|why| {
        format!(
            "{why}.\nNothing was installed. If you trust another build of MLX {MLX_VERSION}, \
             install it yourself and set MLX_DIR to its `mlx/` folder."
        )
    })?;
    let unpacked = tmp.join("install");
    let file_arg = wheel_file.to_string_lossy().into_owned();
    pip(
        &["install", "--no-deps", "--no-index", "--target"],
        &unpacked,
        &file_arg,
    )
    .map_err(|why| format!("could not unpack the verified wheel {file_arg}: {why}"))?;
    check_mlx_dir(&unpacked.join("mlx"))?;
    let file_name = wheel_file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dest = root.join(wheel::install_dir_name(&file_name, &sha));
    if std::fs::rename(&unpacked, &dest).is_err() && check_mlx_dir(&dest.join("mlx")).is_err() {
        return Err(format!(
            "cannot move the MLX install into the cache folder {}",
            dest.display()
        ));
    }
    let mlx_dir = dest.join("mlx");
    check_mlx_dir(&mlx_dir)?;
    Ok(mlx_dir)
}

/// Runs `python3 -m pip <args> <dir> <last>` quietly; the error holds pip's last lines.
fn pip(args: &[&str], dir: &Path, last: &str) -> Result<(), String> {
    let output = Command::new("python3")
        .args(["-m", "pip"])
        .args(args)
        .arg(dir)
        .args(["--quiet", "--disable-pip-version-check"])
        .arg(last)
        .output();
    match output {
        Err(e) => Err(format!("python3 could not be run ({e})")),
        Ok(o) if !o.status.success() => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            let last: Vec<&str> = stderr.lines().rev().take(6).collect();
            let last: Vec<&str> = last.into_iter().rev().collect();
            Err(last.join("\n"))
        }
        Ok(_) => Ok(()),
    }
}

#[cfg(unix)]
fn symlink_dir(src: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(src, link)
}

#[cfg(not(unix))]
fn symlink_dir(_src: &Path, _link: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("symlinks unsupported"))
}
