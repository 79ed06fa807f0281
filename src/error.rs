//! The crate's error type. Every fallible public function returns [`Result`].

use std::fmt;
use std::sync::Arc;

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
///
/// Match on the variant to tell kinds apart; new variants may be added (the enum is
/// `#[non_exhaustive]`). I/O failures keep the [`std::io::Error`] (shared, so that `Error`
/// stays `Clone`) in their `source` field, also returned by
/// [`source`](std::error::Error::source), so its [`kind`](std::io::Error::kind) can be
/// checked:
///
/// ```
/// use std::error::Error as _;
/// use std::io::ErrorKind;
/// use triton_metal::Error;
///
/// let e = Error::io("reading ops.json", ErrorKind::NotFound.into());
/// match &e {
///     Error::Io { context, source } => {
///         assert_eq!(context, "reading ops.json");
///         assert_eq!(source.kind(), ErrorKind::NotFound);
///     }
///     other => panic!("{other}"),
/// }
/// assert!(e.source().is_some());
/// assert!(e.to_string().starts_with("I/O error (reading ops.json): "));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
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
    /// An I/O failure (caches, generated sources, tools).
    #[error("I/O error{}: {source}", if context.is_empty() { String::new() } else { format!(" ({context})") })]
    Io {
        /// What was being done, naming the path or setting involved (may be empty).
        context: String,
        /// The operating system's error (shared, so that `Error` stays `Clone`).
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl Error {
    /// An I/O failure while doing `context` (name the path or setting involved).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }
}

impl From<cxx::Exception> for Error {
    fn from(e: cxx::Exception) -> Self {
        Error::Mlx(e.what().to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io("", e)
    }
}

/// `Result<T, triton_metal::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
