//! The pinned MLX wheels and their check, shared by `build.rs` and `tests/build_script.rs`.
//!
//! Every wheel file that the build may download is listed with its SHA-256 (taken from the
//! files that `pip download` fetched from PyPI). A download whose name is not listed or
//! whose hash differs is refused before anything is unpacked.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The MLX version the bridge is built against.
pub const MLX_VERSION: &str = "0.32.4";

/// `(package, wheel file name, SHA-256)` of every wheel the build may install.
pub const PINNED_WHEELS: &[(&str, &str, &str)] = &[
    (
        "mlx-cpu",
        "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl",
        "0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee",
    ),
    (
        "mlx-cpu",
        "mlx_cpu-0.32.4-py3-none-manylinux_2_35_aarch64.whl",
        "1289e85e64af1fd16380bf331438bfe4afe875d27afc3e0bcf35f427c488fadd",
    ),
    (
        "mlx-metal",
        "mlx_metal-0.32.4-py3-none-macosx_14_0_arm64.whl",
        "8019b2db622599267d66cc168b2f0dbf5af929790a6c3b3913e00eabc42a7947",
    ),
    (
        "mlx-metal",
        "mlx_metal-0.32.4-py3-none-macosx_15_0_arm64.whl",
        "9f0a3cc26d89724434d9684932fc6f3e4e83669d2a895d858ed2c8a55eb84e8b",
    ),
    (
        "mlx-metal",
        "mlx_metal-0.32.4-py3-none-macosx_26_0_arm64.whl",
        "514df92d41a286895d2564b4b18f4da45096bd7a4a0c47e1042f345ad5a7f936",
    ),
];

/// The wheel package for a target OS (`CARGO_CFG_TARGET_OS`), if one is pinned.
pub fn package_for(target_os: &str) -> Option<&'static str> {
    match target_os {
        "linux" => Some("mlx-cpu"),
        "macos" => Some("mlx-metal"),
        _ => None,
    }
}

/// The pinned wheels of `package` for a target architecture (`CARGO_CFG_TARGET_ARCH`).
pub fn candidates(
    package: &str,
    target_arch: &str,
) -> Vec<(&'static str, &'static str, &'static str)> {
    let tags: &[&str] = match target_arch {
        "x86_64" => &["_x86_64.whl"],
        "aarch64" => &["_aarch64.whl", "_arm64.whl"],
        _ => &[],
    };
    PINNED_WHEELS
        .iter()
        .filter(|p| p.0 == package && tags.iter().any(|t| p.1.ends_with(t)))
        .copied()
        .collect()
}

/// Lowercase hex SHA-256 of a file's contents.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Checks a downloaded wheel of `package` against `pinned` (see [`candidates`]): its file
/// name must be listed and its SHA-256 must match. Returns the hash on success.
pub fn verify_wheel(
    package: &str,
    wheel: &Path,
    pinned: &[(&str, &str, &str)],
) -> Result<String, String> {
    let name = wheel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let got = sha256_file(wheel).map_err(|e| format!("cannot read {}: {e}", wheel.display()))?;
    let listed: Vec<&(&str, &str, &str)> = pinned.iter().filter(|p| p.0 == package).collect();
    match listed.iter().find(|p| p.1 == name) {
        Some(p) if p.2 == got => Ok(got),
        Some(p) => Err(format!(
            "the downloaded wheel {name} has SHA-256 {got}, but the pinned hash of that file is \
             {}; refusing to use it (the file differs from the one published on PyPI, or the \
             download was tampered with)",
            p.2
        )),
        None => Err(format!(
            "the downloaded wheel {name} (SHA-256 {got}) is not one of the pinned {package} \
             {MLX_VERSION} wheels ({}); refusing to use it",
            listed.iter().map(|p| p.1).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The folder holding the MLX install cache: `TRITON_METAL_MLX_CACHE`, else
/// `$XDG_CACHE_HOME/triton-metal`, else `$HOME/.cache/triton-metal`, else (no home at all)
/// a folder inside the build's own `OUT_DIR`, never a shared temporary folder.
pub fn cache_root(var: impl Fn(&str) -> Option<String>, out_dir: &Path) -> PathBuf {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(d) = set("TRITON_METAL_MLX_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = set("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("triton-metal");
    }
    if let Some(h) = set("HOME") {
        return PathBuf::from(h).join(".cache/triton-metal");
    }
    out_dir.join("mlx-cache")
}

/// The cache folder of a verified wheel: named by the wheel's file stem and the start of
/// its hash, so an install made from another (or an unchecked) file is never reused.
pub fn install_dir_name(wheel_file: &str, sha256: &str) -> String {
    let stem = wheel_file.strip_suffix(".whl").unwrap_or(wheel_file);
    format!("{stem}-{}", &sha256[..16.min(sha256.len())])
}

/// Whether `dir` lies under the system's temporary folder (shared, writable by anyone): no
/// rpath to such a folder is baked into binaries.
pub fn under_temp_dir(dir: &Path) -> bool {
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    canonical(dir).starts_with(canonical(&std::env::temp_dir()))
}
