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

pub use crate::mlx_abi::{MAX_CONSTANT_ARRAY_SIZE, METAL_ATTRIBUTES};

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
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "log10",
    "exp10",
    "log1p",
    "expm1",
    "cbrt",
    "erfinv",
    "pow",
    "hypot",
    "tanf",
    "asinf",
    "acosf",
    "atanf",
    "atan2f",
    "sinhf",
    "coshf",
    "asinhf",
    "acoshf",
    "atanhf",
    "log10f",
    "exp10f",
    "log1pf",
    "expm1f",
    "cbrtf",
    "erfinvf",
    "powf",
    "hypotf",
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
    "simd_all",
    "simd_max",
    "simd_min",
    "uint4",
    "simd_shuffle_xor",
    "simdgroup_load",
    "simdgroup_store",
    "INFINITY",
    "NAN",
];

/// More names a parameter's identifier must not take: the rest of C++20's keywords, CUDA's
/// built-in variables and the types and namespaces the CUDA and C++ dialects use, the
/// lower-case macros of the C library and of GNU mode, and common library types.
#[rustfmt::skip]
const MORE_RESERVED: &[&str] = &[
    "alignas", "alignof", "asm", "catch", "char8_t", "char16_t", "char32_t", "concept",
    "const_cast", "consteval", "constexpr", "constinit", "co_await", "co_return", "co_yield",
    "decltype", "dynamic_cast", "export", "friend", "mutable", "noexcept", "nullptr",
    "reinterpret_cast", "requires", "static_assert", "static_cast", "thread_local", "throw",
    "try", "typeid", "virtual", "wchar_t", "final", "override", "import", "module",
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "schar", "cg", "mlx", "inf",
    "Shape", "Strides", "std", "size_t", "ptrdiff_t", "int8_t", "int16_t", "int32_t",
    "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "intptr_t", "uintptr_t",
    "linux", "unix", "i386", "assert", "errno", "offsetof", "stdin", "stdout", "stderr",
    "setjmp", "va_arg", "va_start", "va_end", "va_copy", "isinf", "isfinite", "isnormal",
    "signbit", "fpclassify", "isgreater", "isless", "isunordered", "as_type",
    "vertex", "fragment", "sampler", "texture", "precise", "fast", "simd", "atomic",
    "memory_order_relaxed", "mem_flags", "metal_stdlib",
];

/// Whether `name` may be used as it is in generated code: an identifier made of ASCII
/// letters, digits and single underscores, starting with a letter, with a lower-case letter
/// unless it is one letter (all-caps words may be macros), not a keyword or a name the
/// dialects use (see [`RESERVED_WORDS`]), not in the printer's `tm_` namespace, and without
/// a Metal attribute name or `_shape`/`_strides`/`_ndim` inside (MLX reads those as
/// requests for extra kernel parameters).
fn is_plain(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.contains("__")
        && (name.len() == 1 || name.chars().any(|c| c.is_ascii_lowercase()))
        && !name.starts_with("tm_")
        && !RESERVED.contains(&name)
        && !RESERVED_WORDS.contains(&name)
        && !MORE_RESERVED.contains(&name)
        && !METAL_ATTRIBUTES.iter().any(|(a, _)| name.contains(a))
        && !["_shape", "_strides", "_ndim"]
            .iter()
            .any(|s| name.contains(s))
}

/// The identifier generated code (and MLX's kernel signature) uses for parameter `name`:
/// the name itself where `is_plain`, otherwise `tm_p` and the name with each `_`
/// written `_1` and any other character outside `[A-Za-z0-9]` as `_2` and six hex
/// digits. Distinct names get distinct identifiers (plain ones never start with `tm_`,
/// and in a mangled one every `_` after the prefix is followed by a digit), and a mangled
/// identifier never contains a Metal attribute name, `__`, or `<other>_shape`.
pub fn param_ident(name: &str) -> std::borrow::Cow<'_, str> {
    if is_plain(name) {
        return name.into();
    }
    mangle(name).into()
}

/// `tm_p` and `name` with each `_` written `_1` and any other character outside
/// `[A-Za-z0-9]` (any non-ASCII letter, e.g.) as `_2` and six hex digits.
fn mangle(name: &str) -> String {
    let mut s = String::from("tm_p");
    for c in name.chars() {
        match c {
            c if c.is_ascii_alphanumeric() => s.push(c),
            '_' => s.push_str("_1"),
            c => s.push_str(&format!("_2{:06x}", c as u32)),
        }
    }
    s
}

/// The identifier generated code uses for kernel `name` (MLX's kernel is then
/// `custom_kernel_<ident>_<hash>`): the name itself where it is ASCII letters, digits and
/// single inner underscores outside the printer's `tm_` namespace, otherwise mangled as
/// [`param_ident`] mangles (a Unicode name such as `größe` becomes `tm_pgr_20000f6_20000dfe`).
/// Errors and messages keep the user's name.
pub fn kernel_ident(name: &str) -> std::borrow::Cow<'_, str> {
    let plain = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.contains("__")
        && !name.ends_with('_')
        && !name.starts_with("tm_");
    if plain {
        name.into()
    } else {
        mangle(name).into()
    }
}

/// The identifiers of `names` ([`param_ident`]); two parameters of one name are an error.
pub fn param_idents(kernel: &str, names: &[&str]) -> Result<Vec<String>> {
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(Error::Launch {
                kernel: kernel.to_string(),
                msg: format!("two parameters are called `{n}`"),
            });
        }
    }
    Ok(names.iter().map(|n| param_ident(n).into_owned()).collect())
}

/// Verifies that the body and header name only the attributes of [`USED_ATTRIBUTES`] and no
/// `<io>_shape`/`_strides`/`_ndim`: anything else would silently change the signature.
pub fn check_source(kernel: &str, text: &str, io_names: &[String]) -> Result<()> {
    let internal = |msg: String| Error::Compile {
        kernel: kernel.to_string(),
        backend: "metal".into(),
        msg: format!("internal code generator error: {msg}"),
    };
    for (a, _) in METAL_ATTRIBUTES {
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
    fn parameter_identifiers_are_safe_and_distinct() {
        for plain in ["x_ptr", "n_elements", "N", "out", "a1"] {
            assert_eq!(param_ident(plain), plain);
        }
        let odd = [
            "constexpr",
            "nullptr",
            "NULL",
            "static_assert",
            "thread",
            "device",
            "a__b",
            "_x",
            "x_",
            "tm_x",
            "grid_size",
            "thread_position_in_grid",
            "x_shape",
            "half",
            "EOF",
            "threadIdx",
            "x",
            "tm_px",
            "tm_p",
            "p_1",
            "\u{e9}t\u{e9}",
        ];
        let ids: Vec<String> = odd.iter().map(|n| param_ident(n).into_owned()).collect();
        for (n, id) in odd.iter().zip(&ids) {
            assert!(is_plain(n) == (n == id), "{n} -> {id}");
            assert!(
                id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !id.contains("__"),
                "{id}"
            );
            for (a, _) in METAL_ATTRIBUTES {
                assert!(!id.contains(a), "{id} contains {a}");
            }
            for other in &ids {
                for suffix in ["_shape", "_strides", "_ndim"] {
                    assert!(!id.contains(&format!("{other}{suffix}")), "{id} vs {other}");
                }
            }
        }
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{ids:?}");
        assert!(param_idents("k", &["a", "a"]).is_err());
    }

    #[test]
    fn kernel_identifiers_are_ascii() {
        for plain in ["add_kernel", "K2", "matmul_f16"] {
            assert_eq!(kernel_ident(plain), plain);
        }
        let odd = ["größe", "π", "数据", "_x", "x_", "a__b", "tm_x", "1a"];
        let ids: Vec<String> = odd.iter().map(|n| kernel_ident(n).into_owned()).collect();
        for id in &ids {
            assert!(
                id.starts_with("tm_p")
                    && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !id.contains("__")
                    && !id.ends_with('_'),
                "{id}"
            );
        }
        assert_eq!(ids[0], "tm_pgr_20000f6_20000dfe");
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len(), "{ids:?}");
    }

    #[test]
    fn used_attributes_do_not_contain_other_attributes() {
        for u in USED_ATTRIBUTES {
            for (a, _) in METAL_ATTRIBUTES {
                assert!(a == u || !u.contains(a), "{u} contains {a}");
            }
        }
        assert_eq!(grid([3, 1, 1], 128), ([384, 1, 1], [128, 1, 1]));
    }
}
