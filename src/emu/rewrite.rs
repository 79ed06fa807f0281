//! The few source rewrites that turn MSL into C++ the shim can compile.
//!
//! Everything else is left to `metal_shim.h`; these are the spots where C++ syntax itself
//! differs. Line numbers are preserved (no newline is added or removed), so clang's
//! diagnostics point at the kernel's own lines.
//!
//! - `[[...]]` attribute lists are removed (C++ rejects them on explicit instantiations).
//! - `threadgroup T name[N];` becomes a reference into the threadgroup's shared arena
//!   (`auto& name = ::tm_rt::tg_var<T[N]>(slot);`), so all threads of a group see one copy.
//! - `float4(...)`-style vector constructors become `::metal::vmake<float4>(...)`.
//! - `1.5h` half literals become `((half)1.5)`.
//! - `#include <metal_*>` lines disappear (the shim provides all of it).

use crate::{Error, Result};

const VECTOR_ELEMS: [&str; 11] = [
    "float", "half", "int", "uint", "short", "ushort", "char", "uchar", "long", "ulong", "bool",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Space,
    Comment,
    Str,
    Ident,
    Number,
    Punct,
    Preproc,
}

#[derive(Clone, Copy, Debug)]
struct Tok<'a> {
    kind: Kind,
    text: &'a str,
}

fn lex(src: &str) -> Vec<Tok<'_>> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        let start = i;
        let c = b[i];
        let kind = if c == b'\n' || c.is_ascii_whitespace() {
            while i < b.len() && b[i].is_ascii_whitespace() {
                if b[i] == b'\n' {
                    line_start = true;
                }
                i += 1;
            }
            Kind::Space
        } else if c == b'#' && line_start {
            // A preprocessor line, with backslash continuations.
            while i < b.len() && b[i] != b'\n' {
                if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\n' {
                    i += 1;
                }
                i += 1;
            }
            Kind::Preproc
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            Kind::Comment
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i = (i + 2).min(b.len());
            Kind::Comment
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c && b[i] != b'\n' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            Kind::Str
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len() {
                let d = b[i];
                let sign = (d == b'+' || d == b'-') && exponent_sign(&src[start..i]);
                if d.is_ascii_alphanumeric() || d == b'_' || d == b'.' || sign {
                    i += 1;
                } else {
                    break;
                }
            }
            Kind::Number
        } else {
            // One UTF-8 scalar (punctuation or anything non-ASCII).
            i += src[i..].chars().next().map_or(1, char::len_utf8);
            Kind::Punct
        };
        if kind != Kind::Space {
            line_start = false;
        }
        toks.push(Tok {
            kind,
            text: &src[start..i],
        });
    }
    toks
}

/// True when a `+`/`-` after this number prefix is an exponent sign (`1e-3`, `0x1p+2`).
fn exponent_sign(prefix: &str) -> bool {
    let hex = prefix.starts_with("0x") || prefix.starts_with("0X");
    match prefix.as_bytes().last() {
        Some(b'p' | b'P') => true,
        Some(b'e' | b'E') => !hex,
        _ => false,
    }
}

fn newlines(s: &str) -> String {
    s.chars().filter(|c| *c == '\n').collect()
}

fn is_vector_type(name: &str) -> bool {
    VECTOR_ELEMS.iter().any(|e| {
        name.strip_prefix(e)
            .is_some_and(|n| matches!(n, "2" | "3" | "4"))
    })
}

/// The C++ for the shim, and the bytes of threadgroup memory the kernel declares (each
/// declaration 16-byte aligned, as the shim lays them out), when every declared type's size
/// is known here (scalars, vectors, atomics and arrays of them with literal extents).
pub(crate) struct Rewritten {
    pub cpp: String,
    pub threadgroup_bytes: Option<usize>,
}

/// Bytes of one `threadgroup` declaration of type `ty` with extents `dims` (`[`, `N`, `]`
/// tokens), if known.
fn declared_bytes(ty: &str, dims: &[&str]) -> Option<usize> {
    let ty = ty.trim_start_matches("metal::");
    let inner = ty
        .strip_prefix("atomic<")
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(ty);
    let scalar = |t: &str| -> Option<usize> {
        Some(match t {
            "bool" | "char" | "uchar" | "int8_t" | "uint8_t" => 1,
            "short" | "ushort" | "half" | "bfloat" | "int16_t" | "uint16_t" => 2,
            "int" | "uint" | "float" | "int32_t" | "uint32_t" | "atomic_int" | "atomic_uint"
            | "atomic_float" | "atomic_bool" => 4,
            "long" | "ulong" | "int64_t" | "uint64_t" => 8,
            _ => return None,
        })
    };
    let mut size = scalar(inner).or_else(|| {
        let n: usize = match inner.as_bytes().last()? {
            b'2' => 2,
            b'3' | b'4' => 4,
            _ => return None,
        };
        Some(scalar(&inner[..inner.len() - 1])? * n)
    })?;
    for d in dims {
        match *d {
            "[" | "]" => {}
            n => size = size.checked_mul(n.trim_end_matches(['u', 'U']).parse().ok()?)?,
        }
    }
    Some(size)
}

/// Rewrites MSL (header + MLX's wrapped kernel) into C++ for the shim. `kernel` names the
/// kernel in errors.
pub(crate) fn rewrite(src: &str, kernel: &str) -> Result<Rewritten> {
    let toks = lex(src);
    let sig: Vec<usize> = (0..toks.len())
        .filter(|&i| !matches!(toks[i].kind, Kind::Space | Kind::Comment))
        .collect();
    let mut out = String::with_capacity(src.len() + 1024);
    let mut slot = 0usize;
    let mut tg_bytes = Some(0usize);
    let mut k = 0usize; // index into `sig`
    let mut emitted_to = 0usize; // tokens before this index are already written
    let flush = |out: &mut String, from: usize, to: usize| {
        for t in &toks[from..to] {
            out.push_str(t.text);
        }
    };
    while k < sig.len() {
        let i = sig[k];
        let t = toks[i];
        let next = |n: usize| sig.get(k + n).map(|&j| toks[j].text);
        let prev = if k > 0 {
            Some(toks[sig[k - 1]].text)
        } else {
            None
        };
        match t.kind {
            Kind::Preproc => {
                let body = t.text.trim_start_matches('#').trim_start();
                if body.starts_with("include")
                    && (body.contains("<metal_") || body.contains("\"mlx/"))
                    || body.starts_with("pragma METAL")
                {
                    flush(&mut out, emitted_to, i);
                    out.push_str(&newlines(t.text));
                    emitted_to = i + 1;
                }
                k += 1;
            }
            Kind::Punct if t.text == "[" && next(1) == Some("[") => {
                // Attribute list: drop through the matching `]]`.
                let mut depth = 0i32;
                let mut end = k;
                while end < sig.len() {
                    match toks[sig[end]].text {
                        "[" => depth += 1,
                        "]" => depth -= 1,
                        _ => {}
                    }
                    if depth == 0 {
                        break;
                    }
                    end += 1;
                }
                let last = sig.get(end).copied().unwrap_or(toks.len() - 1);
                flush(&mut out, emitted_to, i);
                let dropped: String = toks[i..=last].iter().map(|t| t.text).collect();
                out.push(' ');
                out.push_str(&newlines(&dropped));
                emitted_to = last + 1;
                k = end + 1;
            }
            Kind::Ident
                if t.text == "threadgroup"
                    && prev.is_none_or(|p| matches!(p, ";" | "{" | "}" | ":")) =>
            {
                match threadgroup_decl(&toks, &sig, k, &mut slot, &mut tg_bytes, kernel)? {
                    Some((text, end)) => {
                        flush(&mut out, emitted_to, i);
                        out.push_str(&text);
                        emitted_to = sig[end] + 1;
                        k = end + 1;
                    }
                    None => k += 1,
                }
            }
            Kind::Ident if is_vector_type(t.text) && next(1) == Some("(") => {
                flush(&mut out, emitted_to, i);
                if prev == Some(":") && k >= 2 && toks[sig[k - 2]].text == ":" {
                    out.push_str(&format!("vmake<{}>", t.text));
                } else {
                    out.push_str(&format!("::metal::vmake<{}>", t.text));
                }
                emitted_to = i + 1;
                k += 1;
            }
            Kind::Number
                if (t.text.ends_with('h') || t.text.ends_with('H'))
                    && !t.text.starts_with("0x")
                    && !t.text.starts_with("0X") =>
            {
                flush(&mut out, emitted_to, i);
                out.push_str(&format!("((half){})", &t.text[..t.text.len() - 1]));
                emitted_to = i + 1;
                k += 1;
            }
            _ => k += 1,
        }
    }
    flush(&mut out, emitted_to, toks.len());
    Ok(Rewritten {
        cpp: out,
        threadgroup_bytes: tg_bytes,
    })
}

/// `threadgroup T a[N], b;` at statement start: returns the replacement text and the index
/// (into `sig`) of the closing `;`, or `None` when it is not a plain declaration (e.g. a
/// `threadgroup float* p = ...` pointer, which the shim's empty macro handles).
fn threadgroup_decl(
    toks: &[Tok<'_>],
    sig: &[usize],
    k: usize,
    slot: &mut usize,
    tg_bytes: &mut Option<usize>,
    kernel: &str,
) -> Result<Option<(String, usize)>> {
    let mut end = k + 1;
    let mut depth = 0i32;
    while end < sig.len() {
        let s = toks[sig[end]].text;
        match s {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            _ => {}
        }
        if s == ";" && depth == 0 {
            break;
        }
        if depth < 0 || (depth == 0 && matches!(s, "=" | "*" | "&" | "(" | "{")) {
            return Ok(None);
        }
        end += 1;
    }
    if end >= sig.len() {
        return Ok(None);
    }
    // Split the declarator list at top-level commas (not inside `<>` or `[]`).
    let body: Vec<&str> = sig[k + 1..end].iter().map(|&j| toks[j].text).collect();
    let mut parts: Vec<Vec<&str>> = vec![vec![]];
    let (mut angle, mut square) = (0i32, 0i32);
    for s in body {
        match s {
            "<" => angle += 1,
            ">" => angle -= 1,
            "[" => square += 1,
            "]" => square -= 1,
            _ => {}
        }
        if s == "," && angle == 0 && square == 0 {
            parts.push(vec![]);
        } else if let Some(p) = parts.last_mut() {
            p.push(s);
        }
    }
    // The first declarator carries the type: the name is its last identifier before `[`.
    let first = &parts[0];
    let bracket = first.iter().position(|s| *s == "[").unwrap_or(first.len());
    if bracket == 0 || !toks_is_ident(first[bracket - 1]) {
        return Ok(None);
    }
    let ty = join(&first[..bracket - 1]);
    if ty.is_empty() {
        return Ok(None);
    }
    let mut text = String::new();
    for (n, part) in parts.iter().enumerate() {
        let decl: &[&str] = if n == 0 { &first[bracket - 1..] } else { part };
        let Some((name, dims)) = decl.split_first() else {
            return Ok(None);
        };
        if !toks_is_ident(name) {
            return Ok(None);
        }
        if *slot >= 256 {
            return Err(Error::Compile {
                kernel: kernel.into(),
                backend: "emulator".into(),
                msg: "more than 256 threadgroup declarations".into(),
            });
        }
        text.push_str(&format!(
            "auto& {name} = ::tm_rt::tg_var<{ty}{}>({});",
            join(dims),
            *slot
        ));
        *tg_bytes = tg_bytes
            .zip(declared_bytes(&ty, dims))
            .map(|(sum, b)| sum + b.div_ceil(16) * 16);
        *slot += 1;
        if n + 1 < parts.len() {
            text.push(' ');
        }
    }
    let original: String = toks[sig[k]..=sig[end]].iter().map(|t| t.text).collect();
    text.push_str(&newlines(&original));
    Ok(Some((text, end)))
}

fn toks_is_ident(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn join(toks: &[&str]) -> String {
    let mut s = String::new();
    for (i, t) in toks.iter().enumerate() {
        if i > 0 && toks_is_ident(t) && toks_is_ident(toks[i - 1]) {
            s.push(' ');
        }
        s.push_str(t);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_attributes_threadgroup_vectors_and_half_literals() {
        let src = "#include <metal_stdlib>\n[[kernel]] void f(const device float* a [[buffer(0)]],\n uint3 t [[thread_position_in_grid]]) {\n  threadgroup float tmp[32], other[4];\n  threadgroup atomic<int> count;\n  threadgroup float* p = tmp; // threadgroup float no[2];\n  float4 v = float4(1.0h, 2.0f, float2(0));\n  metal::float2 w = metal::float2(1);\n}\n";
        let out = rewrite(src, "f").unwrap().cpp;
        assert_eq!(out.lines().count(), src.lines().count());
        assert!(!out.contains("[["));
        assert!(out.contains("auto& tmp = ::tm_rt::tg_var<float[32]>(0); auto& other = ::tm_rt::tg_var<float[4]>(1);"));
        assert!(out.contains("auto& count = ::tm_rt::tg_var<atomic<int>>(2);"));
        assert!(out.contains("threadgroup float* p = tmp; // threadgroup float no[2];"));
        assert!(
            out.contains("::metal::vmake<float4>(((half)1.0), 2.0f, ::metal::vmake<float2>(0))")
        );
        assert!(out.contains("metal::vmake<float2>(1)"));
        assert!(!out.contains("metal_stdlib"));
        // tmp: 128 bytes, other: 16, count: 4 -> 16 (each 16-byte aligned).
        assert_eq!(rewrite(src, "f").unwrap().threadgroup_bytes, Some(160));
        let generic = "threadgroup T buf[32];";
        assert_eq!(rewrite(generic, "g").unwrap().threadgroup_bytes, None);
        let vecs = "threadgroup float4 a[2][3]; threadgroup half3 b[1u];";
        assert_eq!(rewrite(vecs, "v").unwrap().threadgroup_bytes, Some(96 + 16));
    }

    #[test]
    fn leaves_declarations_and_exponents_alone() {
        let src = "float4 load(const device float4* p) { return p[0] * 1e-3f + 0x1p+2f; }";
        assert_eq!(rewrite(src, "k").unwrap().cpp, src);
    }
}
