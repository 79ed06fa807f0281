//! The library's settings as one explicit value, installed once at program start.
//!
//! Without a [`Config`], the library reads the `TRITON_METAL_*` environment variables (the
//! table below). A program that wants its behaviour fixed in code builds a `Config` and
//! installs it before it builds or launches any kernel:
//!
//! ```
//! use triton_metal::{runtime::Target, Config};
//!
//! Config::new()
//!     .target(Target::Cpu)            // what `Target::Auto` launches use
//!     .debug(false)                   // never print IR / generated code
//!     .environment(false)             // ignore every TRITON_METAL_* variable
//!     .install()?;
//! // A second install is refused: settings are fixed for the process.
//! assert!(Config::new().install().is_err());
//! # Ok::<(), triton_metal::Error>(())
//! ```
//!
//! Precedence, for each setting: the value set on the installed `Config`; else (while
//! [`Config::environment`] is on, the default) the environment variable; else the built-in
//! default. The variables are meant as overrides for debugging a program that does not set
//! the value itself; `TRITON_METAL_TARGET` in particular reroutes every launch left at
//! [`Target::Auto`] in every crate of the process, unless the program sets
//! [`Config::target`] or turns the environment off.
//!
//! | variable | `Config` method | what it does |
//! |---|---|---|
//! | `TRITON_METAL_TARGET` | [`Config::target`] | where [`Target::Auto`] launches run: `cpu`, `cpu-compiled`, `metal`, `cuda`, `emulated`, `emulated-reverse`, `emulated-simd-ahead`, `emulated-simd-behind`, `emulated-shuffled` (seed 1) |
//! | `TRITON_METAL_HW` | [`Config::hardware`] | plan for another chip (`m1`, `m3-max`, `m4-pro`, `sm90`, `cpu`, ...) instead of the detected device |
//! | `TRITON_METAL_DEBUG` | [`Config::debug`] | print the IR, the layouts, the generated source and the launch shape (`1` on, `0` off) |
//! | `TRITON_METAL_CACHE_DIR` | [`Config::source_dir`] | write every generated source there; also the folder of the autotuning cache |
//! | `TRITON_METAL_EMU_CXX` | [`Config::compiler`] | the clang (>= 15) that compiles kernels for `cpu-compiled` and `emulated` |
//! | `TRITON_METAL_EMU_CACHE` | [`Config::compile_cache_dir`] | where compiled kernels are cached |
//! | `TRITON_METAL_EMU_KEEP` | [`Config::keep_compiled_sources`] | keep the C++ beside each compiled kernel |
//!
//! Variables read only by this crate's own test suite and CI, not by library code users
//! call: `TRITON_METAL_REQUIRE_EMU` (a missing clang fails the emulator tests instead of
//! skipping them), `TRITON_METAL_NVRTC_DIR` and `TRITON_METAL_REQUIRE_NVRTC` (NVRTC for
//! the CUDA compile tests). Read by `build.rs` at build time: `MLX_DIR`,
//! `TRITON_METAL_MLX_CACHE`, `DOCS_RS` (see the README's "Where MLX comes from").

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use crate::emu::LaneOrder;
use crate::error::{Error, Result};
use crate::opt::HardwareProfile;
use crate::runtime::Target;
use crate::settings;

/// The library's settings; see the [module documentation](self) for the table of settings
/// and their environment variables.
#[derive(Clone, Debug)]
pub struct Config {
    values: HashMap<&'static str, Option<OsString>>,
    environment: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

impl Config {
    /// No setting fixed; the environment variables fill in every setting.
    pub fn new() -> Config {
        Config {
            values: HashMap::new(),
            environment: true,
        }
    }

    fn set(mut self, name: &'static str, value: Option<OsString>) -> Config {
        self.values.insert(name, value);
        self
    }

    /// Where launches left at [`Target::Auto`] run (`Target::Auto` itself: picked from MLX's
    /// default device). Launches that name a target keep it.
    pub fn target(self, target: Target) -> Config {
        let name = match target {
            Target::Auto => "auto",
            Target::Cpu => "cpu",
            Target::CpuCompiled => "cpu-compiled",
            Target::Metal => "metal",
            Target::Cuda => "cuda",
            Target::Emulated(LaneOrder::Forward) => "emulated",
            Target::Emulated(LaneOrder::Reverse) => "emulated-reverse",
            Target::Emulated(LaneOrder::SimdgroupsForward) => "emulated-simd-ahead",
            Target::Emulated(LaneOrder::SimdgroupsReverse) => "emulated-simd-behind",
            // The environment names one seed.
            Target::Emulated(LaneOrder::Shuffled(_)) => "emulated-shuffled",
        };
        self.set("TRITON_METAL_TARGET", Some(name.into()))
    }

    /// Plan for the named chip's hardware profile instead of the detected device
    /// (checked by [`Config::install`]; names as [`HardwareProfile::named`] takes them).
    pub fn hardware(self, name: &str) -> Config {
        self.set("TRITON_METAL_HW", Some(name.into()))
    }

    /// Print each kernel's IR, layouts, generated source and launch shape on stderr.
    pub fn debug(self, on: bool) -> Config {
        self.set(
            "TRITON_METAL_DEBUG",
            Some(if on { "1" } else { "0" }.into()),
        )
    }

    /// Write every generated source (MSL, CUDA, C++) into `dir`, which also holds the
    /// autotuning cache; `None`: write no sources (and keep the autotuning cache in the
    /// user's cache folder).
    pub fn source_dir(self, dir: Option<PathBuf>) -> Config {
        self.set("TRITON_METAL_CACHE_DIR", dir.map(OsString::from))
    }

    /// The clang (15 or newer) that compiles kernels for [`Target::CpuCompiled`] and
    /// [`Target::Emulated`], instead of the newest `clang++-N` on the `PATH`.
    pub fn compiler(self, command: &str) -> Config {
        self.set("TRITON_METAL_EMU_CXX", Some(command.into()))
    }

    /// Where compiled kernels are cached, instead of the user's cache folder.
    pub fn compile_cache_dir(self, dir: PathBuf) -> Config {
        self.set("TRITON_METAL_EMU_CACHE", Some(dir.into()))
    }

    /// Keep the generated C++ beside each compiled kernel in the compile cache.
    pub fn keep_compiled_sources(self, on: bool) -> Config {
        self.set("TRITON_METAL_EMU_KEEP", on.then(|| OsString::from("1")))
    }

    /// Whether the `TRITON_METAL_*` environment variables fill in the settings this value
    /// leaves unset (default `true`). `false`: the library reads none of them.
    pub fn environment(mut self, on: bool) -> Config {
        self.environment = on;
        self
    }

    /// Makes these the settings of the process. Call it once, before any kernel is built or
    /// launched (settings already read, such as the compiler found, are not read again).
    /// `Err` for a hardware name no profile has, or when settings were installed before.
    pub fn install(self) -> Result<()> {
        if let Some(Some(hw)) = self.values.get("TRITON_METAL_HW") {
            let name = hw.to_string_lossy();
            HardwareProfile::named(&name).map_err(|e| match e {
                Error::InvalidArgument(m) => {
                    Error::InvalidArgument(format!("Config::hardware: {m}"))
                }
                other => other,
            })?;
        }
        let installed = settings::install(settings::Installed {
            values: self.values,
            environment: self.environment,
        });
        if installed {
            Ok(())
        } else {
            Err(Error::InvalidArgument(
                "Config::install: settings were installed before; they are fixed for the process"
                    .into(),
            ))
        }
    }
}
