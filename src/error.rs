//! The crate's error type. Every fallible public function returns [`Result`].

use std::fmt;

/// Where in the user's Rust source an op was built (from `#[track_caller]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    /// Source file.
    pub file: &'static str,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl SourceLoc {
    /// The caller's location (through any chain of `#[track_caller]` functions).
    #[track_caller]
    pub fn caller() -> SourceLoc {
        let l = std::panic::Location::caller();
        SourceLoc {
            file: l.file(),
            line: l.line(),
            column: l.column(),
        }
    }
}

impl fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Everything that can go wrong, from MLX calls to kernel building and launching.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// An exception thrown by MLX, with MLX's own message.
    #[error("MLX error: {0}")]
    Mlx(String),
    /// A kernel failed to build or verify (DSL misuse, shape or dtype mismatch).
    #[error("kernel `{kernel}`: op `{op}` at {loc}: {msg}")]
    Build {
        /// Kernel name.
        kernel: String,
        /// Op being built (Triton's name, e.g. `load`, `dot`).
        op: String,
        /// User source location.
        loc: SourceLoc,
        /// What is wrong, with the shapes and dtypes involved.
        msg: String,
    },
    /// A launch was rejected before running (arguments, grid, constexprs, limits).
    #[error("kernel `{kernel}` launch: {msg}")]
    Launch {
        /// Kernel name.
        kernel: String,
        /// What is wrong, naming the argument.
        msg: String,
    },
    /// A kernel failed while running (e.g. an out-of-bounds access on the CPU executor).
    #[error("kernel `{kernel}` runtime: {msg}")]
    Runtime {
        /// Kernel name.
        kernel: String,
        /// What happened: op, program id, offset.
        msg: String,
    },
    /// Generated code failed to compile (Metal, CUDA or the emulation harness).
    #[error("kernel `{kernel}` failed to compile for {backend}: {msg}")]
    Compile {
        /// Kernel name.
        kernel: String,
        /// `metal`, `cuda`, `emulator`.
        backend: String,
        /// Compiler output, with the offending source lines.
        msg: String,
    },
    /// A feature that exists in Triton or MLX but not (yet) here.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bad argument to a host-side API (array construction, reference ops, tools).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An I/O failure (caches, tools).
    #[error("I/O error: {0}")]
    Io(String),
}

impl From<cxx::Exception> for Error {
    fn from(e: cxx::Exception) -> Self {
        Error::Mlx(e.what().to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

/// `Result<T, triton_metal::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
