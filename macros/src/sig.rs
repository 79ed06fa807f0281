//! The kernel's signature: which parameters are pointers, scalars, constexprs or arguments of
//! the generated factory function.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, Pat, PathArguments, Type};

/// One parameter of a `#[jit]` kernel.
pub enum Param {
    /// `x_ptr: Ptr<F32>` (or `ConstPtr<F32>`, Triton's `tl.const`: never stored through): a
    /// pointer argument; the dtype expression.
    Ptr {
        name: Ident,
        mutable: bool,
        dtype: TokenStream,
        constant: bool,
    },
    /// `n: i32`: a scalar argument of this dtype.
    Scalar {
        name: Ident,
        mutable: bool,
        dtype: TokenStream,
    },
    /// `BLOCK: Constexpr` or `BLOCK: Constexpr<64>` (with a default).
    Constexpr {
        name: Ident,
        default: Option<syn::Expr>,
    },
    /// `dtype: DType`: an argument of the factory function, captured by the kernel.
    Factory { name: Ident, ty: Type },
}

const DTYPES: &[(&str, &str)] = &[
    ("F16", "F16"),
    ("BF16", "BF16"),
    ("F32", "F32"),
    ("F64", "F64"),
    ("I8", "I8"),
    ("I16", "I16"),
    ("I32", "I32"),
    ("I64", "I64"),
    ("U8", "U8"),
    ("U16", "U16"),
    ("U32", "U32"),
    ("U64", "U64"),
    ("Bool", "Bool"),
    ("float16", "F16"),
    ("bfloat16", "BF16"),
    ("float32", "F32"),
    ("float64", "F64"),
    ("int1", "Bool"),
    ("int8", "I8"),
    ("int16", "I16"),
    ("int32", "I32"),
    ("int64", "I64"),
    ("uint8", "U8"),
    ("uint16", "U16"),
    ("uint32", "U32"),
    ("uint64", "U64"),
];

const SCALARS: &[(&str, &str)] = &[
    ("bool", "Bool"),
    ("i8", "I8"),
    ("i16", "I16"),
    ("i32", "I32"),
    ("i64", "I64"),
    ("u8", "U8"),
    ("u16", "U16"),
    ("u32", "U32"),
    ("u64", "U64"),
    ("f32", "F32"),
    ("f64", "F64"),
];

const PARAM_HELP: &str = "a kernel parameter is `name: Ptr<F32>` (a pointer; any dtype), \
`name: i32` (a scalar: bool, i8..i64, u8..u64, f32, f64, or `Scalar<F16>`), \
`NAME: Constexpr` / `NAME: Constexpr<64>` (a constexpr, with a default), \
or `name: DType` (an argument of the generated function, usable as `Ptr<name>`)";

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// The dtype named inside `Ptr<..>` / `Scalar<..>`: a dtype name (`F32`, `float16`) or any
/// other path, used as an expression (a `dtype: DType` factory argument).
fn dtype_expr(arg: &GenericArgument) -> syn::Result<TokenStream> {
    let GenericArgument::Type(ty) = arg else {
        return Err(syn::Error::new_spanned(
            arg,
            "expected a dtype such as `F32`",
        ));
    };
    let span = ty.span();
    if let Type::Path(p) = ty {
        if let Some(id) = p.path.get_ident() {
            let s = id.to_string();
            if let Some((_, d)) = DTYPES.iter().find(|(n, _)| *n == s) {
                let d = Ident::new(d, span);
                return Ok(quote_spanned!(span=> ::triton_metal::DType::#d));
            }
        }
        let path = &p.path;
        return Ok(quote_spanned!(span=> #path));
    }
    Err(syn::Error::new_spanned(
        ty,
        "expected a dtype such as `F32`",
    ))
}

fn single_generic(seg: &syn::PathSegment) -> syn::Result<Option<&GenericArgument>> {
    match &seg.arguments {
        PathArguments::None => Ok(None),
        PathArguments::AngleBracketed(a) if a.args.len() == 1 => Ok(a.args.first()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{}` takes one argument", seg.ident),
        )),
    }
}

/// Classifies one parameter.
pub fn param(arg: &FnArg) -> syn::Result<Param> {
    let FnArg::Typed(pt) = arg else {
        return Err(syn::Error::new_spanned(arg, "a kernel has no `self`"));
    };
    let Pat::Ident(pi) = &*pt.pat else {
        return Err(syn::Error::new_spanned(
            &pt.pat,
            "kernel parameters are plain names (`x_ptr: Ptr<F32>`)",
        ));
    };
    if pi.by_ref.is_some() || pi.subpat.is_some() {
        return Err(syn::Error::new_spanned(
            &pt.pat,
            "kernel parameters are plain names",
        ));
    }
    let (name, mutable) = (pi.ident.clone(), pi.mutability.is_some());
    let Some(seg) = last_segment(&pt.ty) else {
        return Err(syn::Error::new_spanned(&pt.ty, PARAM_HELP));
    };
    let kind = seg.ident.to_string();
    let generic = single_generic(seg)?;
    match (kind.as_str(), generic) {
        ("Ptr" | "ConstPtr", Some(g)) => Ok(Param::Ptr {
            name,
            mutable,
            dtype: dtype_expr(g)?,
            constant: kind == "ConstPtr",
        }),
        ("Scalar", Some(g)) => Ok(Param::Scalar {
            name,
            mutable,
            dtype: dtype_expr(g)?,
        }),
        ("Constexpr", g) => {
            if mutable {
                return Err(syn::Error::new_spanned(
                    &pt.pat,
                    "a constexpr is fixed for the specialisation: drop `mut`",
                ));
            }
            let default = match g {
                None => None,
                Some(GenericArgument::Const(e)) => Some(e.clone()),
                Some(GenericArgument::Type(Type::Path(p))) => {
                    Some(syn::Expr::Path(syn::ExprPath {
                        attrs: vec![],
                        qself: None,
                        path: p.path.clone(),
                    }))
                }
                Some(other) => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "a constexpr default is an integer: `Constexpr<64>`",
                    ))
                }
            };
            Ok(Param::Constexpr { name, default })
        }
        ("DType", None) => Ok(Param::Factory {
            name,
            ty: (*pt.ty).clone(),
        }),
        (s, None) => match SCALARS.iter().find(|(n, _)| *n == s) {
            Some((_, d)) => {
                let d = Ident::new(d, pt.ty.span());
                Ok(Param::Scalar {
                    name,
                    mutable,
                    dtype: quote!(::triton_metal::DType::#d),
                })
            }
            None => Err(syn::Error::new_spanned(&pt.ty, PARAM_HELP)),
        },
        _ => Err(syn::Error::new_spanned(&pt.ty, PARAM_HELP)),
    }
}

impl Param {
    /// The statement declaring this parameter inside the `tl::jit` closure (`k` is the
    /// closure's `KernelBuilder`); factory arguments need none.
    pub fn declare(&self, k: &Ident) -> TokenStream {
        let decl = |name: &Ident, mutable: bool, method: &str, dtype: &TokenStream| {
            let span = name.span();
            let m = mutable.then(|| quote!(mut));
            let method = Ident::new(method, span);
            let lit = syn::LitStr::new(&name.to_string(), span);
            quote_spanned!(span=> let #m #name: ::triton_metal::tl::Tensor = #k.#method(#dtype, #lit);)
        };
        match self {
            Param::Ptr {
                name,
                mutable,
                dtype,
                constant,
            } => decl(
                name,
                *mutable,
                if *constant { "const_ptr" } else { "ptr" },
                dtype,
            ),
            Param::Scalar {
                name,
                mutable,
                dtype,
            } => decl(name, *mutable, "scalar", dtype),
            Param::Constexpr { name, default } => {
                let span = name.span();
                let lit = syn::LitStr::new(&name.to_string(), span);
                match default {
                    None => quote_spanned!(span=> let #name: i64 = #k.constexpr(#lit);),
                    Some(d) => quote_spanned!(span=> let #name: i64 = #k.constexpr_or(#lit, #d);),
                }
            }
            Param::Factory { .. } => TokenStream::new(),
        }
    }

    /// `name: Type` for the factory function's argument list, if this is one.
    pub fn factory_arg(&self) -> Option<TokenStream> {
        match self {
            Param::Factory { name, ty } => Some(quote!(#name: #ty)),
            _ => None,
        }
    }
}

/// A span-less identifier for generated bindings that cannot clash with the user's names.
pub fn hidden(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}
