//! NVRTC, loaded at run time: compiles generated CUDA to PTX without a GPU (and without
//! the CUDA toolkit: the PyPI wheels `nvidia-cuda-nvrtc-cu12` and `nvidia-cuda-runtime-cu12`
//! are enough). Used to prove that every program the CUDA back end prints compiles.
//!
//! [`Nvrtc::from_env`] looks in the folder named by `TRITON_METAL_NVRTC_DIR` (a
//! `pip install --target` folder of those two wheels: `nvidia/cuda_nvrtc/lib/libnvrtc.so.*`
//! and `nvidia/cuda_runtime/include/cuda_fp16.h`).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Environment variable naming the folder NVRTC and the CUDA headers were installed into.
pub const NVRTC_DIR_ENV: &str = "TRITON_METAL_NVRTC_DIR";

type Prog = *mut c_void;

/// A loaded NVRTC library and the include folder for `cuda_fp16.h` / `cuda_bf16.h`.
pub struct Nvrtc {
    lib: libloading::Library,
    include: PathBuf,
    /// `(major, minor)` of the library.
    pub version: (i32, i32),
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Nvrtc {}.{} (include {})",
            self.version.0,
            self.version.1,
            self.include.display()
        )
    }
}

fn err(msg: impl Into<String>) -> Error {
    Error::Compile {
        kernel: String::new(),
        backend: "cuda".into(),
        msg: msg.into(),
    }
}

impl Nvrtc {
    /// NVRTC from the folder in `TRITON_METAL_NVRTC_DIR`; `Err` saying what is missing.
    pub fn from_env() -> Result<Nvrtc> {
        let dir = std::env::var_os(NVRTC_DIR_ENV)
            .ok_or_else(|| err(format!("{NVRTC_DIR_ENV} is not set")))?;
        Nvrtc::from_dir(Path::new(&dir))
    }

    /// NVRTC from a `pip install --target` folder of the NVRTC and runtime wheels.
    pub fn from_dir(dir: &Path) -> Result<Nvrtc> {
        let libdir = dir.join("nvidia/cuda_nvrtc/lib");
        let lib = std::fs::read_dir(&libdir)
            .map_err(|e| err(format!("{}: {e}", libdir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnvrtc.so"))
            })
            .min()
            .ok_or_else(|| err(format!("no libnvrtc.so* in {}", libdir.display())))?;
        let include = dir.join("nvidia/cuda_runtime/include");
        if !include.join("cuda_fp16.h").exists() {
            return Err(err(format!("no cuda_fp16.h in {}", include.display())));
        }
        Nvrtc::open(&lib, &include)
    }

    /// Loads `lib` (a `libnvrtc.so`); `include` holds `cuda_fp16.h`.
    pub fn open(lib: &Path, include: &Path) -> Result<Nvrtc> {
        // SAFETY: loading NVRTC runs no initialisers with preconditions.
        let lib = unsafe { libloading::Library::new(lib) }
            .map_err(|e| err(format!("loading {}: {e}", lib.display())))?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: `nvrtcVersion(int*, int*)` per nvrtc.h.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int> = lib
                .get(b"nvrtcVersion\0")
                .map_err(|e| err(format!("nvrtcVersion: {e}")))?;
            f(&mut major, &mut minor);
        }
        Ok(Nvrtc {
            lib,
            include: include.to_path_buf(),
            version: (major, minor),
        })
    }

    /// Compiles `source` for virtual architecture `arch` (e.g. `compute_90`); returns the
    /// PTX, or `Err` with NVRTC's log.
    pub fn compile(&self, name: &str, source: &str, arch: &str) -> Result<String> {
        type Create = unsafe extern "C" fn(
            *mut Prog,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        type Compile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
        type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
        type Get = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
        type Destroy = unsafe extern "C" fn(*mut Prog) -> c_int;
        let sym = |n: &[u8]| {
            err(format!(
                "missing NVRTC symbol {}",
                String::from_utf8_lossy(n)
            ))
        };
        let cstr = |s: &str| CString::new(s).map_err(|_| err("NUL byte in CUDA source or option"));
        let src = cstr(source)?;
        let cname = cstr(name)?;
        let opts: Vec<CString> = [
            "-std=c++17".to_string(),
            format!("-arch={arch}"),
            format!("-I{}", self.include.display()),
        ]
        .iter()
        .map(|o| cstr(o))
        .collect::<Result<_>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: signatures as in nvrtc.h; every pointer passed outlives the call, the
        // program is destroyed on every path, buffers are sized by NVRTC's own answers.
        unsafe {
            let create: libloading::Symbol<Create> = self
                .lib
                .get(b"nvrtcCreateProgram\0")
                .map_err(|_| sym(b"nvrtcCreateProgram"))?;
            let compile: libloading::Symbol<Compile> = self
                .lib
                .get(b"nvrtcCompileProgram\0")
                .map_err(|_| sym(b"nvrtcCompileProgram"))?;
            let log_size: libloading::Symbol<Size> = self
                .lib
                .get(b"nvrtcGetProgramLogSize\0")
                .map_err(|_| sym(b"nvrtcGetProgramLogSize"))?;
            let log: libloading::Symbol<Get> = self
                .lib
                .get(b"nvrtcGetProgramLog\0")
                .map_err(|_| sym(b"nvrtcGetProgramLog"))?;
            let ptx_size: libloading::Symbol<Size> = self
                .lib
                .get(b"nvrtcGetPTXSize\0")
                .map_err(|_| sym(b"nvrtcGetPTXSize"))?;
            let ptx: libloading::Symbol<Get> = self
                .lib
                .get(b"nvrtcGetPTX\0")
                .map_err(|_| sym(b"nvrtcGetPTX"))?;
            let destroy: libloading::Symbol<Destroy> = self
                .lib
                .get(b"nvrtcDestroyProgram\0")
                .map_err(|_| sym(b"nvrtcDestroyProgram"))?;
            let mut prog: Prog = std::ptr::null_mut();
            let rc = create(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            if rc != 0 {
                return Err(err(format!("nvrtcCreateProgram failed ({rc})")));
            }
            let rc = compile(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
            let read = |size: &Size, get: &Get| -> String {
                let mut n = 0usize;
                size(prog, &mut n);
                let mut buf = vec![0 as c_char; n.max(1)];
                get(prog, buf.as_mut_ptr());
                CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
            };
            let out = if rc == 0 {
                Ok(read(&ptx_size, &ptx))
            } else {
                Err(err(format!(
                    "NVRTC rejected `{name}`:\n{}",
                    read(&log_size, &log)
                )))
            };
            destroy(&mut prog);
            out
        }
    }
}
