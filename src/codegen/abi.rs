//! The contract with MLX's `fast::metal_kernel` (STYLE rule 12), in one place.
//!
//! MLX writes the kernel signature itself: inputs become `const device T*` (`constant` when
//! the array has fewer than 8 elements, `const constant T&` when it is 0-d), outputs
//! `device T*` (`device atomic<T>*` with `atomic_outputs`), and a parameter is added for
//! every Metal attribute name and every `<io>_shape`/`_strides`/`_ndim` that occurs *as a
//! substring* anywhere in the body. The generated body therefore refers to the attributes it
//! needs by their exact names and must contain no other such name; [`check_source`] proves
//! it for every program.
//!
//! Parameter convention: a pointer parameter that is stored to (or updated atomically) is
//! an output, whether or not it is also read; every other pointer is an input; a scalar
//! parameter is an input passed as a 0-d MLX array (`const constant T& name`).

use crate::error::{Error, Result};

/// Inputs with fewer elements than this are passed in the `constant` address space.
pub const MAX_CONSTANT_ARRAY_SIZE: usize = 8;

/// MLX's table of Metal attributes: a parameter is added for each one named in the source.
pub const METAL_ATTRIBUTES: [&str; 20] = [
    "dispatch_quadgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup",
    "dispatch_threads_per_threadgroup",
    "grid_origin",
    "grid_size",
    "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup",
    "simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup",
    "thread_execution_width",
    "thread_index_in_quadgroup",
    "thread_index_in_simdgroup",
    "thread_index_in_threadgroup",
    "thread_position_in_grid",
    "thread_position_in_threadgroup",
    "threadgroup_position_in_grid",
    "threadgroups_per_grid",
    "threads_per_grid",
    "threads_per_simdgroup",
    "threads_per_threadgroup",
];

/// The attributes generated code may use (program id, program count, thread, lane, warp).
pub const USED_ATTRIBUTES: [&str; 5] = [
    "threadgroup_position_in_grid",
    "threadgroups_per_grid",
    "thread_index_in_threadgroup",
    "thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup",
];

/// Words a parameter must not be called, because they would clash with the language or with
/// the names the body declares.
const RESERVED: &[&str] = &[
    "bool",
    "char",
    "short",
    "int",
    "long",
    "uchar",
    "ushort",
    "uint",
    "ulong",
    "half",
    "bfloat",
    "float",
    "double",
    "void",
    "auto",
    "const",
    "constant",
    "device",
    "thread",
    "threadgroup",
    "kernel",
    "metal",
    "using",
    "namespace",
    "template",
    "typename",
    "return",
    "if",
    "else",
    "for",
    "while",
    "do",
    "break",
    "continue",
    "true",
    "false",
    "struct",
    "class",
    "static",
    "inline",
    "sizeof",
    "signed",
    "unsigned",
    "switch",
    "case",
    "default",
    "INFINITY",
    "NAN",
];

/// Identifiers a generated name must not take: C++ keywords and alternative tokens, and
/// the Metal functions and types the printer calls (a local named `exp` would hide `exp()`).
#[rustfmt::skip]
pub(crate) const RESERVED_WORDS: &[&str] = &[
    "and",
    "or",
    "xor",
    "not",
    "bitand",
    "bitor",
    "compl",
    "and_eq",
    "or_eq",
    "xor_eq",
    "not_eq",
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "class",
    "const",
    "constant",
    "continue",
    "default",
    "delete",
    "device",
    "do",
    "double",
    "else",
    "enum",
    "explicit",
    "extern",
    "false",
    "float",
    "for",
    "goto",
    "half",
    "bfloat",
    "if",
    "inline",
    "int",
    "kernel",
    "long",
    "namespace",
    "new",
    "operator",
    "private",
    "protected",
    "public",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "thread",
    "threadgroup",
    "true",
    "typedef",
    "typename",
    "uchar",
    "uint",
    "ulong",
    "union",
    "unsigned",
    "ushort",
    "using",
    "void",
    "volatile",
    "while",
    "abs",
    "fabs",
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "erf",
    "floor",
    "ceil",
    "max",
    "min",
    "fmax",
    "fmin",
    "fma",
    "fmod",
    "clamp",
    "isnan",
    "mulhi",
    "as_type",
    "metal",
    "simd_sum",
    "simd_max",
    "simd_min",
    "uint4",
    "simd_shuffle_xor",
    "simdgroup_load",
    "simdgroup_store",
    "INFINITY",
    "NAN",
];

/// Rejects parameter names that would change or break the signature MLX writes.
pub fn check_param_names(kernel: &str, names: &[&str]) -> Result<()> {
    let bad = |msg: String| Error::Launch {
        kernel: kernel.to_string(),
        msg,
    };
    for (i, n) in names.iter().enumerate() {
        let ident = !n.is_empty()
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !n.starts_with(|c: char| c.is_ascii_digit());
        if !ident {
            return Err(bad(format!("parameter `{n}` is not a C identifier")));
        }
        if n.starts_with("tm_") || RESERVED.contains(n) || RESERVED_WORDS.contains(n) {
            return Err(bad(format!(
                "parameter `{n}` is reserved in generated Metal code (a keyword or a `tm_` name)"
            )));
        }
        if let Some(a) = METAL_ATTRIBUTES.iter().find(|a| n.contains(*a)) {
            return Err(bad(format!(
                "parameter `{n}` contains the Metal attribute name `{a}`, which MLX would add \
                 to the kernel signature"
            )));
        }
        for other in names.iter().take(i).chain(names.iter().skip(i + 1)) {
            for suffix in ["_shape", "_strides", "_ndim"] {
                if n.contains(&format!("{other}{suffix}")) {
                    return Err(bad(format!(
                        "parameter `{n}` contains `{other}{suffix}`, which MLX reads as a \
                         request for `{other}`'s {} buffer",
                        &suffix[1..]
                    )));
                }
            }
            if n == other {
                return Err(bad(format!("two parameters are called `{n}`")));
            }
        }
    }
    Ok(())
}

/// Verifies that the body and header name only the attributes of [`USED_ATTRIBUTES`] and no
/// `<io>_shape`/`_strides`/`_ndim`: anything else would silently change the signature.
pub fn check_source(kernel: &str, text: &str, io_names: &[String]) -> Result<()> {
    let internal = |msg: String| Error::Compile {
        kernel: kernel.to_string(),
        backend: "metal".into(),
        msg: format!("internal code generator error: {msg}"),
    };
    for a in METAL_ATTRIBUTES {
        if USED_ATTRIBUTES.contains(&a) {
            continue;
        }
        if text.contains(a) {
            return Err(internal(format!("generated source names `{a}`")));
        }
    }
    for n in io_names {
        for suffix in ["_shape", "_strides", "_ndim"] {
            let word = format!("{n}{suffix}");
            if text.contains(&word) {
                return Err(internal(format!("generated source names `{word}`")));
            }
        }
    }
    Ok(())
}

/// MLX's grid counts threads: `programs x threads` on axis 0, programs on axes 1 and 2.
/// Returns `(grid, threadgroup)`.
pub fn grid(programs: [usize; 3], threads_per_program: usize) -> ([usize; 3], [usize; 3]) {
    (
        [
            programs[0] * threads_per_program,
            programs[1].max(1),
            programs[2].max(1),
        ],
        [threads_per_program, 1, 1],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_change_the_signature_are_rejected() {
        assert!(check_param_names("k", &["x_ptr", "y", "n"]).is_ok());
        for bad in [
            vec!["grid_size"],
            vec!["x", "x_shape"],
            vec!["half"],
            vec!["tm_x"],
            vec!["a", "a"],
            vec!["1x"],
        ] {
            assert!(check_param_names("k", &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn used_attributes_do_not_contain_other_attributes() {
        for u in USED_ATTRIBUTES {
            for a in METAL_ATTRIBUTES {
                assert!(a == u || !u.contains(a), "{u} contains {a}");
            }
        }
        assert_eq!(grid([3, 1, 1], 128), ([384, 1, 1], [128, 1, 1]));
    }
}
