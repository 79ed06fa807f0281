//! Finding clang, compiling generated C++ into a cached shared object, loading it: the
//! just-in-time C++ build that the Metal emulator (`emu`) and the compiled CPU executor
//! (`native`) share, with the C++ model of Metal's types and math both compile in front of
//! their kernels ([`METAL_CORE`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::cache;
use crate::error::{Error, Result};

/// Metal's types and math as C++ (no runtime): compiled in front of the emulator's runtime
/// (`emu::METAL_SHIM`) and in front of the compiled CPU executor's (`codegen::cpu`).
pub const METAL_CORE: &str = include_str!("metal_core.h");

/// Why nothing can be compiled here.
pub(crate) const MISSING_CLANG: &str =
    "the Metal emulator needs clang >= 15 (`_Float16` stands in for \
    Metal's `half`): install it, e.g. `apt-get install clang-19`, or point \
    TRITON_METAL_EMU_CXX at a clang++";

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
/// `TRITON_METAL_EMU_KEEP` is set, or when it failed to compile): `$TRITON_METAL_EMU_CACHE`,
/// else `emu` in the user's cache folder (`cache.rs`, which also checks that the folder is
/// private to the current user).
pub fn cache_dir() -> Result<PathBuf> {
    cache::dir(cache::Purpose::Kernels)
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

/// The cache key of `cpp` built as `build` says with `clang`: a SHA-256 digest of the
/// compiler's path and version, the host CPU, the build's flags and extra key, and the source.
fn cache_key(clang: &Clang, cpp: &str, build: &Build) -> String {
    let path = clang.path.to_string_lossy();
    let cpu = cache::cpu_identity();
    let mut parts: Vec<&[u8]> = vec![
        path.as_bytes(),
        clang.version.as_bytes(),
        cpu.as_bytes(),
        build.key.as_bytes(),
    ];
    parts.extend(build.flags.iter().map(|f| f.as_bytes()));
    parts.push(cpp.as_bytes());
    cache::hash_key(&parts)
}

/// Compiles (or finds in the cache) `cpp` as `build` says and returns the address of its
/// entry point. `quoted` is the generated part of `cpp`, quoted in compile errors.
pub(crate) fn load_symbol(
    cpp: &str,
    kernel: &str,
    quoted: &str,
    build: &Build,
) -> Result<*const c_void> {
    let clang = clang().ok_or_else(|| Error::Unsupported(MISSING_CLANG.into()))?;
    let key = cache_key(clang, cpp, build);
    if let Some(f) = loaded().lock().ok().and_then(|m| m.get(&key).copied()) {
        return Ok(f.0);
    }
    let dir = cache_dir().map_err(|e| Error::Compile {
        kernel: kernel.into(),
        backend: build.backend.into(),
        msg: e.to_string(),
    })?;
    load_in(&dir, &key, clang, cpp, kernel, quoted, build)
}

/// [`load_symbol`] with the cache directory `dir` (private to this user, checked by the
/// caller) and the key already computed. An existing `<key>.so` is loaded only if
/// [`cache::check_file`] accepts it; a missing one is compiled first.
#[allow(clippy::too_many_arguments)]
fn load_in(
    dir: &Path,
    key: &str,
    clang: &Clang,
    cpp: &str,
    kernel: &str,
    quoted: &str,
    build: &Build,
) -> Result<*const c_void> {
    let err = |msg: String| Error::Compile {
        kernel: kernel.into(),
        backend: build.backend.into(),
        msg,
    };
    let so = dir.join(format!("{key}.so"));
    if !cache::check_file(&so).map_err(|e| err(e.to_string()))? {
        compile(clang, cpp, dir, key, &so, kernel, quoted, build)?;
        // Checked again: what is loaded is what was just checked, in a directory no one
        // else can write to.
        if !cache::check_file(&so).map_err(|e| err(e.to_string()))? {
            return Err(err(format!("{} vanished after compiling", so.display())));
        }
    }
    // SAFETY: the library is our own compiled kernel (in a directory and a file only this
    // user can write); its initialisers only set up thread-locals. It is leaked so the
    // function pointer stays valid for the process.
    let lib = unsafe { libloading::Library::new(&so) }
        .map_err(|e| err(format!("cannot load {}: {e}", so.display())))?;
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: only the address is taken; callers know the entry's signature.
    let f: *const c_void = unsafe { lib.get::<*const c_void>(build.symbol) }
        .map(|s| *s)
        .map_err(|e| err(format!("{} has no entry point: {e}", so.display())))?;
    if let Ok(mut m) = loaded().lock() {
        m.insert(key.to_string(), Entry(f));
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
    let src = cache::unique_path(dir, key, ".cpp");
    let tmp = cache::unique_path(dir, key, ".so");
    let io = |what: &str, p: &Path, e: std::io::Error| Error::Compile {
        kernel: kernel.into(),
        backend: build.backend.into(),
        msg: format!("cannot {what} {}: {e}", p.display()),
    };
    std::fs::write(&src, cpp).map_err(|e| io("write", &src, e))?;
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
    // Whatever the umask, the cached object is this user's alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io("set the mode of", &tmp, e))?;
    }
    if let Err(e) = std::fs::rename(&tmp, so) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("rename into", so, e));
    }
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
    fn versions_parse() {
        assert_eq!(
            clang_major("Debian clang version 19.1.7 (3~deb12u1)"),
            Some(19)
        );
        assert_eq!(clang_major("clang version 14.0.6"), Some(14));
        assert_eq!(clang_major("gcc"), None);
    }

    #[cfg(unix)]
    #[test]
    fn planted_objects_are_never_loaded() {
        use std::os::unix::fs::PermissionsExt;
        if !crate::emu::Emulator::should_run("planted_objects_are_never_loaded").unwrap() {
            return;
        }
        let clang = clang().unwrap();
        let dir = std::env::temp_dir().join(format!("tm-plant-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        cache::ensure_private_dir(&dir, "test").unwrap();
        let build = Build {
            flags: vec!["-std=c++20", "-shared", "-fPIC"],
            symbol: b"tm_plant_probe\0",
            backend: "emulator",
            source_tag: "kernel.metal",
            key: String::new(),
        };
        let cpp = format!(
            "extern \"C\" int tm_plant_probe() {{ return 7; }} // {:?}\n",
            dir
        );
        let key = cache_key(clang, &cpp, &build);
        let so = dir.join(format!("{key}.so"));
        // Another user's object under the expected name, writable by all: refused, not run.
        std::fs::write(&so, b"not an object").unwrap();
        std::fs::set_permissions(&so, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = load_in(&dir, &key, clang, &cpp, "probe", "", &build)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&so.display().to_string()) && e.contains("refusing"),
            "{e}"
        );
        // Without it the object is built, made private and loaded.
        std::fs::remove_file(&so).unwrap();
        let f = load_in(&dir, &key, clang, &cpp, "probe", "", &build).unwrap();
        // SAFETY: the probe above has exactly this signature.
        let probe = unsafe { std::mem::transmute::<*const c_void, extern "C" fn() -> i32>(f) };
        assert_eq!(probe(), 7);
        assert!(cache::check_file(&so).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn keys_cover_compiler_cpu_flags_and_source() {
        let c = Clang {
            path: PathBuf::from("/usr/bin/clang++-19"),
            version: "clang version 19.1.7".into(),
        };
        let b = |key: &str, flags: Vec<&'static str>| Build {
            flags,
            symbol: b"x\0",
            backend: "cpu",
            source_tag: "kernel.cpp",
            key: key.into(),
        };
        let base = cache_key(&c, "int x;", &b("", vec!["-O1"]));
        assert_eq!(base.len(), 64);
        assert_eq!(base, cache_key(&c, "int x;", &b("", vec!["-O1"])));
        assert_ne!(base, cache_key(&c, "int y;", &b("", vec!["-O1"])));
        assert_ne!(base, cache_key(&c, "int x;", &b("", vec!["-O2"])));
        assert_ne!(base, cache_key(&c, "int x;", &b("avx2", vec!["-O1"])));
        let other = Clang {
            version: "clang version 18.1.0".into(),
            ..c.clone()
        };
        assert_ne!(base, cache_key(&other, "int x;", &b("", vec!["-O1"])));
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
