//! Where the library reads its settings: the program's installed [`crate::Config`] first,
//! then (unless the program turned them off) the `TRITON_METAL_*` environment variables.
//!
//! Every module reads its setting through [`var`] / [`var_os`] with the variable's name, so
//! the variable names are the settings' keys and there is one place that decides
//! precedence. This module sits below every layer (it imports nothing from the crate).

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::OnceLock;

/// Settings a program installed: `values[name]` is the value for the variable `name`
/// (`None`: explicitly off); a name absent from `values` falls back to the environment when
/// `environment` is true.
pub(crate) struct Installed {
    pub(crate) values: HashMap<&'static str, Option<OsString>>,
    pub(crate) environment: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Installs the process's settings; `false` when settings were installed before.
pub(crate) fn install(settings: Installed) -> bool {
    INSTALLED.set(settings).is_ok()
}

/// The value of setting `name`: the installed one, else the environment variable `name`.
pub(crate) fn var_os(name: &str) -> Option<OsString> {
    match INSTALLED.get() {
        Some(s) => match s.values.get(name) {
            Some(v) => v.clone(),
            None if s.environment => std::env::var_os(name),
            None => None,
        },
        None => std::env::var_os(name),
    }
}

/// [`var_os`] as UTF-8 text (`None` when unset or not valid UTF-8).
pub(crate) fn var(name: &str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// Whether a flag setting is on: set, non-empty and not `0`.
pub(crate) fn flag(name: &str) -> bool {
    var(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Environment variable that turns on compile-time dumps to stderr.
pub const DEBUG_ENV: &str = "TRITON_METAL_DEBUG";

/// Whether compile-time dumps ([`DEBUG_ENV`]) are on: the DSL's pass pipeline, the printers
/// and the compiled CPU executor print what they build.
pub(crate) fn debug_enabled() -> bool {
    flag(DEBUG_ENV)
}
