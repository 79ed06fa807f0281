//! Finding clang, compiling the generated C++ into a cached shared object, loading it.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::{Error, Result};

/// `tm_emu_launch(bufs, grid, threadgroup, reverse, workers, err, errlen)` in the .so.
pub(crate) type LaunchFn = unsafe extern "C" fn(
    *const *mut c_void,
    *const u32,
    *const u32,
    i32,
    i32,
    *mut c_char,
    usize,
) -> i32;

/// How one kind of generated C++ is built and entered.
pub(crate) struct Build {
    /// clang flags (part of the cache key).
    pub flags: Vec<&'static str>,
    /// The exported entry point, NUL-terminated.
    pub symbol: &'static [u8],
    /// The back end's name in errors.
    pub backend: &'static str,
    /// The `#line` file name of the generated part, whose lines compile errors quote.
    pub source_tag: &'static str,
    /// Extra cache-key text (what else the binary depends on, e.g. the host CPU).
    pub key: String,
}

/// The emulator's build: `-O1` keeps compiles fast while inlining the shim.
/// Stack-clash protection probes big stack frames page by page, so a kernel whose locals
/// overflow its fiber stack hits the guard page instead of writing over other memory.
const FLAGS: [&str; 12] = [
    "-std=c++20",
    "-O1",
    "-shared",
    "-fPIC",
    "-fno-exceptions",
    "-fno-rtti",
    "-pthread",
    "-w",
    "-ferror-limit=20",
    "-fno-color-diagnostics",
    "-ffp-contract=off",
    "-fstack-clash-protection",
];

/// Oldest clang whose x86-64 target has `_Float16` (Metal's `half`).
const MIN_CLANG: u32 = 15;

/// A usable clang: its path and `--version` first line.
#[derive(Clone, Debug)]
pub(crate) struct Clang {
    pub path: PathBuf,
    pub version: String,
}

fn clang_major(version: &str) -> Option<u32> {
    let rest = &version[version.find("clang version ")? + "clang version ".len()..];
    rest.split(['.', ' ']).next()?.parse().ok()
}

fn probe(cmd: &str) -> Option<Clang> {
    let out = Command::new(cmd).arg("--version").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    (clang_major(&version)? >= MIN_CLANG).then(|| Clang {
        path: PathBuf::from(cmd),
        version,
    })
}

/// The clang to use: `$TRITON_METAL_EMU_CXX`, else the newest `clang++-N`, else `clang++`,
/// provided it is at least clang 15.
pub(crate) fn clang() -> Option<&'static Clang> {
    static FOUND: OnceLock<Option<Clang>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(cmd) = crate::settings::var("TRITON_METAL_EMU_CXX") {
                return probe(&cmd);
            }
            (MIN_CLANG..=25)
                .rev()
                .map(|v| format!("clang++-{v}"))
                .chain(["clang++".to_string()])
                .find_map(|c| probe(&c))
        })
        .as_ref()
}

/// Where compiled kernels are kept (the generated C++ beside them when
/// `TRITON_METAL_EMU_KEEP` is set, or when it failed to compile): `$TRITON_METAL_EMU_CACHE`, else
/// `$XDG_CACHE_HOME/triton-metal/emu`, else `$HOME/.cache/triton-metal/emu`, else the
/// system temp dir.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = crate::settings::var_os("TRITON_METAL_EMU_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("triton-metal").join("emu");
    }
    if let Some(d) = std::env::var_os("HOME") {
        return PathBuf::from(d)
            .join(".cache")
            .join("triton-metal")
            .join("emu");
    }
    std::env::temp_dir().join("triton-metal-emu")
}

/// FNV-1a, twice with different offsets: stable across Rust versions (unlike
/// `DefaultHasher`), which an on-disk cache needs.
fn hash128(parts: &[&str]) -> String {
    let mut h = [0xcbf29ce484222325u64, 0x84222325cbf29ce4u64];
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            for (k, x) in h.iter_mut().enumerate() {
                *x ^= b as u64 + k as u64;
                *x = x.wrapping_mul(0x100000001b3);
            }
        }
    }
    format!("{:016x}{:016x}", h[0], h[1])
}

/// A loaded entry point (libraries are never unloaded, so the address stays valid).
#[derive(Clone, Copy)]
struct Entry(*const c_void);
// SAFETY: the address of code in a library that is never unloaded.
unsafe impl Send for Entry {}

fn loaded() -> &'static Mutex<HashMap<String, Entry>> {
    static LOADED: OnceLock<Mutex<HashMap<String, Entry>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles (or finds in the cache) `cpp` and returns its launch entry. `msl` is the
/// kernel as MLX wrote it, quoted in compile errors.
pub(crate) fn load(cpp: &str, kernel: &str, msl: &str) -> Result<LaunchFn> {
    let build = Build {
        flags: FLAGS.to_vec(),
        symbol: b"tm_emu_launch\0",
        backend: "emulator",
        source_tag: "kernel.metal",
        key: String::new(),
    };
    let f = load_symbol(cpp, kernel, msl, &build)?;
    // SAFETY: the harness appends `tm_emu_launch` with exactly this signature.
    Ok(unsafe { std::mem::transmute::<*const c_void, LaunchFn>(f) })
}

/// Compiles (or finds in the cache) `cpp` as `build` says and returns the address of its
/// entry point. `quoted` is the generated part of `cpp`, quoted in compile errors.
pub(crate) fn load_symbol(
    cpp: &str,
    kernel: &str,
    quoted: &str,
    build: &Build,
) -> Result<*const c_void> {
    let clang = clang().ok_or_else(|| Error::Unsupported(super::MISSING_CLANG.into()))?;
    let path_str = clang.path.to_string_lossy();
    let mut key_parts = vec![
        path_str.as_ref(),
        clang.version.as_str(),
        build.key.as_str(),
    ];
    key_parts.extend(build.flags.iter().copied());
    key_parts.push(cpp);
    let key = hash128(&key_parts);
    if let Some(f) = loaded().lock().ok().and_then(|m| m.get(&key).copied()) {
        return Ok(f.0);
    }
    let mut dir = cache_dir();
    if std::fs::create_dir_all(&dir).is_err() {
        // A read-only home (some CI sandboxes) must not stop the emulator.
        dir = std::env::temp_dir().join("triton-metal-emu");
        std::fs::create_dir_all(&dir)?;
    }
    let so = dir.join(format!("{key}.so"));
    if !so.exists() {
        compile(clang, cpp, &dir, &key, &so, kernel, quoted, build)?;
    }
    // SAFETY: the library is our own compiled kernel; its initialisers only set up
    // thread-locals. It is leaked so the function pointer stays valid for the process.
    let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| Error::Compile {
        kernel: kernel.into(),
        backend: build.backend.into(),
        msg: format!("cannot load {}: {e}", so.display()),
    })?;
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: only the address is taken; callers know the entry's signature.
    let f: *const c_void = unsafe { lib.get::<*const c_void>(build.symbol) }
        .map(|s| *s)
        .map_err(|e| Error::Compile {
            kernel: kernel.into(),
            backend: build.backend.into(),
            msg: format!("{} has no entry point: {e}", so.display()),
        })?;
    if let Ok(mut m) = loaded().lock() {
        m.insert(key, Entry(f));
    }
    Ok(f)
}

#[allow(clippy::too_many_arguments)]
fn compile(
    clang: &Clang,
    cpp: &str,
    dir: &Path,
    key: &str,
    so: &Path,
    kernel: &str,
    quoted: &str,
    build: &Build,
) -> Result<()> {
    // Unique names, then rename: concurrent tests and processes may build the same kernel.
    let unique = format!(
        "{key}.{}.{}",
        std::process::id(),
        format!("{:?}", std::thread::current().id())
            .trim_start_matches("ThreadId(")
            .trim_end_matches(')')
    );
    let src = dir.join(format!("{unique}.cpp"));
    std::fs::write(&src, cpp)?;
    let tmp = dir.join(format!("{unique}.so.tmp"));
    let out = Command::new(&clang.path)
        .args(&build.flags)
        .arg("-x")
        .arg("c++")
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .output()
        .map_err(|e| Error::Compile {
            kernel: kernel.into(),
            backend: build.backend.into(),
            msg: format!("cannot run {}: {e}", clang.path.display()),
        })?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Compile {
            kernel: kernel.into(),
            backend: build.backend.into(),
            msg: compile_message(&stderr, build.source_tag, quoted, &src),
        });
    }
    std::fs::rename(&tmp, so)?;
    if crate::settings::var_os("TRITON_METAL_EMU_KEEP").is_none() {
        // The .cpp embeds the whole shim; keep it only on request (or on failure).
        let _ = std::fs::remove_file(&src);
    }
    Ok(())
}

/// clang's diagnostics (trimmed) followed by the generated lines (`#line` file `tag`) they
/// point at.
fn compile_message(stderr: &str, tag: &str, quoted: &str, src: &Path) -> String {
    let lines: Vec<&str> = quoted.lines().collect();
    let mut cited = Vec::new();
    let marker = format!("{tag}:");
    for l in stderr.lines() {
        let Some(rest) = l.split(marker.as_str()).nth(1) else {
            continue;
        };
        if !rest.contains("error") {
            continue;
        }
        if let Some(n) = rest.split(':').next().and_then(|n| n.parse::<usize>().ok()) {
            if !cited.contains(&n) {
                cited.push(n);
            }
        }
    }
    let mut msg: String = stderr.chars().take(6000).collect();
    if !cited.is_empty() {
        msg.push_str("\noffending generated lines:\n");
        for n in cited {
            if let Some(text) = n.checked_sub(1).and_then(|i| lines.get(i)) {
                msg.push_str(&format!("{n:>5} | {text}\n"));
            }
        }
    }
    msg.push_str(&format!("(C++ kept at {})", src.display()));
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_hashes_are_stable() {
        assert_eq!(
            clang_major("Debian clang version 19.1.7 (3~deb12u1)"),
            Some(19)
        );
        assert_eq!(clang_major("clang version 14.0.6"), Some(14));
        assert_eq!(clang_major("gcc"), None);
        assert_eq!(hash128(&["a", "b"]), hash128(&["a", "b"]));
        assert_ne!(hash128(&["ab"]), hash128(&["a", "b"]));
    }

    #[test]
    fn compile_messages_quote_the_offending_msl_line() {
        let msg = compile_message(
            "kernel.metal:2:5: error: use of undeclared identifier 'y'\n",
            "kernel.metal",
            "line one\n  out[i] = y;\n",
            Path::new("/tmp/x.cpp"),
        );
        assert!(msg.contains("    2 |   out[i] = y;"), "{msg}");
    }
}
