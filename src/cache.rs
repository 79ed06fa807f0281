//! On-disk caches (compiled kernels, autotune results, generated sources on request): where
//! they live, and the checks that keep anyone else from planting files in them.
//!
//! The user's cache folder is `$XDG_CACHE_HOME/triton-metal`, else
//! `$HOME/.cache/triton-metal`, else `<temp dir>/triton-metal-<uid>`. Generated sources and
//! the autotuning cache go to the `TRITON_METAL_CACHE_DIR` setting if set, else (autotuning
//! only) the user's cache folder; compiled kernels go to the `TRITON_METAL_EMU_CACHE`
//! setting if set, else `<user's cache folder>/emu` ([`Purpose`]). When the user's cache
//! folder cannot be created (a read-only home), the temp-dir one is used instead.
//!
//! On Unix every directory created here gets mode 0700, and a cache directory is used only
//! if it is owned by the current user and writable by no one else; a file is read or loaded
//! only if it is a regular file with the same owner and no group or other write bit.
//! Anything else is refused with an error naming the path and the variable that chose it.
//! Files are written under a unique temporary name in their final directory and renamed
//! into place, so a reader never sees half a file. Cache keys are SHA-256 digests
//! ([`hash_key`]).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The setting naming the folder of generated sources and of the autotuning cache.
pub const CACHE_DIR_ENV: &str = "TRITON_METAL_CACHE_DIR";

/// The setting naming the folder of compiled kernels (default `<user's cache folder>/emu`).
pub const KERNEL_CACHE_ENV: &str = "TRITON_METAL_EMU_CACHE";

/// What a cache directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Autotune results and generated sources.
    Root,
    /// Compiled kernels (shared objects of the emulator and the compiled CPU executor).
    Kernels,
}

/// A cache directory and what chose it (for error messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The directory.
    pub path: PathBuf,
    /// How it was chosen, e.g. "$TRITON_METAL_CACHE_DIR" or "$HOME/.cache".
    pub origin: String,
    /// Whether the user named it explicitly (no fallback to the temp dir then).
    pub explicit: bool,
}

/// A setting (`TRITON_METAL_*`, through [`crate::settings`]) or, for the standard
/// `XDG_CACHE_HOME` and `HOME`, the environment; empty counts as unset.
fn env(name: &str) -> Option<OsString> {
    let v = if name.starts_with("TRITON_METAL_") {
        crate::settings::var_os(name)
    } else {
        std::env::var_os(name)
    };
    v.filter(|v| !v.is_empty())
}

fn temp_root() -> Location {
    Location {
        path: std::env::temp_dir().join(format!("triton-metal-{}", user_id())),
        origin:
            "the system temp dir (neither TRITON_METAL_CACHE_DIR, XDG_CACHE_HOME nor HOME is set)"
                .into(),
        explicit: false,
    }
}

fn root_location() -> Location {
    match env(CACHE_DIR_ENV) {
        Some(d) => Location {
            path: PathBuf::from(d),
            origin: format!("${CACHE_DIR_ENV}"),
            explicit: true,
        },
        None => user_location(),
    }
}

/// The user's cache folder (no setting of this crate moves it).
fn user_location() -> Location {
    if let Some(d) = env("XDG_CACHE_HOME") {
        return Location {
            path: PathBuf::from(d).join("triton-metal"),
            origin: "$XDG_CACHE_HOME".into(),
            explicit: false,
        };
    }
    if let Some(d) = env("HOME") {
        return Location {
            path: PathBuf::from(d).join(".cache").join("triton-metal"),
            origin: "$HOME".into(),
            explicit: false,
        };
    }
    temp_root()
}

/// Where the cache for `purpose` is, as the environment says (nothing is created or checked).
pub fn location(purpose: Purpose) -> Location {
    match purpose {
        Purpose::Root => root_location(),
        Purpose::Kernels => match env(KERNEL_CACHE_ENV) {
            Some(d) => Location {
                path: PathBuf::from(d),
                origin: format!("${KERNEL_CACHE_ENV}"),
                explicit: true,
            },
            None => {
                let r = user_location();
                Location {
                    path: r.path.join("emu"),
                    ..r
                }
            }
        },
    }
}

/// The cache directory for `purpose`, created (mode 0700) if missing and checked to be
/// private to the current user.
pub fn dir(purpose: Purpose) -> Result<PathBuf> {
    let loc = location(purpose);
    match ensure_private_dir(&loc.path, &loc.origin) {
        Ok(()) => Ok(loc.path),
        Err(e) if loc.explicit => Err(e),
        Err(e) => {
            // Only a directory that cannot be created falls back; one that exists but is
            // not private is an error.
            if loc.path.exists() {
                return Err(e);
            }
            let t = temp_root();
            let path = match purpose {
                Purpose::Root => t.path,
                Purpose::Kernels => t.path.join("emu"),
            };
            ensure_private_dir(&path, &t.origin)?;
            Ok(path)
        }
    }
}

/// The directory generated sources are written to: `$TRITON_METAL_CACHE_DIR` when set
/// (created and checked as [`dir`] does), else `None`.
pub fn source_dir() -> Result<Option<PathBuf>> {
    match env(CACHE_DIR_ENV) {
        Some(_) => dir(Purpose::Root).map(Some),
        None => Ok(None),
    }
}

#[cfg(unix)]
fn user_id() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn user_id() -> u32 {
    0
}

/// Creates `path` (and missing parents) with mode 0700 and checks that it is a directory
/// owned by the current user that no one else can write. `origin` says what chose the path.
pub fn ensure_private_dir(path: &Path, origin: &str) -> Result<()> {
    let context = || format!("cache directory {} (from {origin})", path.display());
    let fail = |what: String| Error::io(context(), refused(what));
    if path.exists() && !path.is_dir() {
        return Err(fail("is not a directory".into()));
    }
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(path).map_err(|e| Error::io(context(), e))?;
    let md = std::fs::metadata(path).map_err(|e| Error::io(context(), e))?;
    if !md.is_dir() {
        return Err(fail("is not a directory".into()));
    }
    check_private(&md).map_err(fail)
}

/// The error of a refused path: `what` says why.
fn refused(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::PermissionDenied, what)
}

#[cfg(unix)]
fn check_private(md: &std::fs::Metadata) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = user_id();
    if md.uid() != me {
        return Err(format!(
            "is owned by uid {}, not by the current user (uid {me}); refusing to use it",
            md.uid()
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Err(format!(
            "has mode {:o}: group or others can write to it; refusing to use it (chmod go-w)",
            md.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_md: &std::fs::Metadata) -> std::result::Result<(), String> {
    Ok(())
}

/// Whether `path` is a cached file that may be trusted: `Ok(false)` if it does not exist,
/// `Ok(true)` if it is a regular file owned by the current user that no one else can
/// write, an error naming the path otherwise.
pub fn check_file(path: &Path) -> Result<bool> {
    let md = match std::fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(format!("cached file {}", path.display()), e)),
    };
    let fail = |what: String| Error::io(format!("cached file {}", path.display()), refused(what));
    if !md.file_type().is_file() {
        return Err(fail("is not a regular file; refusing to use it".into()));
    }
    check_private(&md).map(|()| true).map_err(fail)
}

/// A path in `dir` no other thread or process of this user will pick: `<stem>.<pid>.<n><ext>`.
pub fn unique_path(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{stem}.{}.{n}.tmp{ext}", std::process::id()))
}

/// Writes `bytes` to `dir/name` atomically: a new file (mode 0600) under a unique name in
/// `dir`, then a rename over `name`.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    let dest = dir.join(name);
    let tmp = unique_path(dir, name, "");
    let fail = |what: &str, e: std::io::Error| Error::io(format!("{what} {}", dest.display()), e);
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let written = o
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_data()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("writing", e));
    }
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("renaming a finished file to", e));
    }
    Ok(dest)
}

/// The SHA-256 digest (hex) of `parts`, each prefixed by its length so that no two
/// different lists of parts give the same input.
pub fn hash_key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// What identifies the host CPU for code built for it (`-march=native`): on Linux the
/// vendor, family, model and feature flags of `/proc/cpuinfo`, else the target features
/// the standard library detects.
pub fn cpu_identity() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let mut wanted: Vec<&str> = info
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| {
                let k = l.split(':').next().unwrap_or("").trim();
                matches!(
                    k,
                    "vendor_id"
                        | "cpu family"
                        | "model"
                        | "model name"
                        | "flags"
                        | "Features"
                        | "CPU implementer"
                        | "CPU part"
                )
            })
            .collect();
        if wanted.is_empty() {
            wanted.push(std::env::consts::ARCH);
        }
        let mut id = wanted.join("\n");
        #[cfg(target_arch = "x86_64")]
        for (n, on) in [
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
            ("f16c", std::arch::is_x86_feature_detected!("f16c")),
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ("avx512bw", std::arch::is_x86_feature_detected!("avx512bw")),
        ] {
            id.push_str(&format!("\n{n}={on}"));
        }
        id
    })
    .clone()
}

#[cfg(test)]
mod tests;
