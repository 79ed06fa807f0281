//! The kernel's signature: which parameters are pointers, scalars, constexprs or arguments of
//! the generated factory function.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, Ident, Pat, PathArguments, Type};

/// Where a pointer's element dtype comes from.
pub enum PtrDtype {
    /// `Ptr<F32>`, `Ptr<dtype>`: this dtype expression.
    Fixed(TokenStream),
    /// `Ptr`: its launch argument's (a generic pointer).
    Any,
    /// `Ptr<T>` with `T` a type parameter of the kernel: the first such pointer is generic
    /// and binds `T` to its element dtype; later ones take `T`.
    Var { var: Ident, first: bool },
}

/// The kind of a constexpr, from its annotation (`Constexpr<bool>`) or its default.
#[derive(Clone, Copy, PartialEq)]
pub enum CxKind {
    Int,
    Bool,
    Float,
    Str,
    DType,
}

/// One parameter of a `#[jit]` kernel.
pub enum Param {
    /// `x_ptr: Ptr<F32>` (or `ConstPtr<F32>`, Triton's `tl.const`: never stored through): a
    /// pointer argument.
    Ptr {
        name: Ident,
        mutable: bool,
        dtype: PtrDtype,
        constant: bool,
    },
    /// `n: i32`: a scalar argument of this dtype.
    Scalar {
        name: Ident,
        mutable: bool,
        dtype: TokenStream,
    },
    /// `n: Scalar`: a scalar argument of its argument's dtype (a generic scalar).
    AnyScalar { name: Ident, mutable: bool },
    /// `BLOCK: Constexpr`, `BLOCK: Constexpr<64>` (with a default), `ACT: Constexpr<&str>`,
    /// `ACT: Constexpr<"relu">`, `ACT: Constexpr<&str, "relu">`, ...
    Constexpr {
        name: Ident,
        kind: CxKind,
        default: Option<TokenStream>,
    },
    /// `dtype: DType`: an argument of the factory function, captured by the kernel.
    Factory { name: Ident, ty: Box<Type> },
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
`name: Ptr` (a pointer to its argument's dtype), \
`name: i32` (a scalar: bool, i8..i64, u8..u64, f32, f64, or `Scalar<F16>`; `Scalar`: its \
argument's dtype), \
`NAME: Constexpr` / `NAME: Constexpr<64>` (a constexpr, with a default; also \
`Constexpr<bool>`, `Constexpr<f64>`, `Constexpr<&str>`, `Constexpr<DType>`), \
or `name: DType` (an argument of the generated function, usable as `Ptr<name>`)";

const CONSTEXPR_HELP: &str = "a constexpr is `Constexpr` (an integer), `Constexpr<KIND>` \
(KIND: i64, bool, f64, &str, DType), `Constexpr<DEFAULT>` (an integer, bool, float or \
string literal, or a path to an i64 constant) or `Constexpr<KIND, DEFAULT>`";

/// The constexpr kind a type names (`bool`, `f64`, `&str`, `DType`, ...).
fn constexpr_kind(ty: &Type) -> Option<CxKind> {
    match ty {
        Type::Reference(r) => match &*r.elem {
            Type::Path(p) if p.path.is_ident("str") => Some(CxKind::Str),
            _ => None,
        },
        Type::Path(p) if p.qself.is_none() => {
            let id = p.path.segments.last()?.ident.to_string();
            match id.as_str() {
                "i64" => Some(CxKind::Int),
                "bool" => Some(CxKind::Bool),
                "f64" => Some(CxKind::Float),
                "str" | "String" => Some(CxKind::Str),
                "DType" => Some(CxKind::DType),
                _ => None,
            }
        }
        _ => None,
    }
}

/// A literal default's kind.
fn literal_kind(lit: &syn::Lit) -> Option<CxKind> {
    match lit {
        syn::Lit::Int(_) => Some(CxKind::Int),
        syn::Lit::Bool(_) => Some(CxKind::Bool),
        syn::Lit::Float(_) => Some(CxKind::Float),
        syn::Lit::Str(_) => Some(CxKind::Str),
        _ => None,
    }
}

/// A constexpr default written as a generic argument, as an expression of `kind`: a literal,
/// a block, a path (a constant, or a dtype name for a dtype).
fn default_expr(arg: &GenericArgument, kind: CxKind) -> syn::Result<TokenStream> {
    let expr = match arg {
        GenericArgument::Const(e) => quote!(#e),
        GenericArgument::Type(Type::Path(p)) if kind == CxKind::DType => {
            dtype_expr(arg).unwrap_or_else(|_| quote!(#p))
        }
        GenericArgument::Type(Type::Path(p)) => {
            let path = &p.path;
            quote!(#path)
        }
        other => return Err(syn::Error::new_spanned(other, CONSTEXPR_HELP)),
    };
    Ok(match kind {
        CxKind::Str => quote!(::std::string::String::from(#expr)),
        _ => expr,
    })
}

/// `Constexpr`, `Constexpr<KIND>`, `Constexpr<DEFAULT>`, `Constexpr<KIND, DEFAULT>`.
fn constexpr_param(name: Ident, seg: &syn::PathSegment) -> syn::Result<Param> {
    let args: Vec<&GenericArgument> = match &seg.arguments {
        PathArguments::None => Vec::new(),
        PathArguments::AngleBracketed(a) => a.args.iter().collect(),
        other => return Err(syn::Error::new_spanned(other, CONSTEXPR_HELP)),
    };
    let kind_of = |a: &GenericArgument| match a {
        GenericArgument::Type(t) => constexpr_kind(t),
        _ => None,
    };
    let (kind, default) = match args.as_slice() {
        [] => (CxKind::Int, None),
        [a] => match kind_of(a) {
            Some(k) => (k, None),
            None => {
                let k = match a {
                    GenericArgument::Const(syn::Expr::Lit(l)) => literal_kind(&l.lit)
                        .ok_or_else(|| syn::Error::new_spanned(a, CONSTEXPR_HELP))?,
                    GenericArgument::Const(_) | GenericArgument::Type(Type::Path(_)) => CxKind::Int,
                    other => return Err(syn::Error::new_spanned(other, CONSTEXPR_HELP)),
                };
                (k, Some(default_expr(a, k)?))
            }
        },
        [k, d] => {
            let kind = kind_of(k).ok_or_else(|| syn::Error::new_spanned(k, CONSTEXPR_HELP))?;
            (kind, Some(default_expr(d, kind)?))
        }
        _ => return Err(syn::Error::new_spanned(&seg.arguments, CONSTEXPR_HELP)),
    };
    Ok(Param::Constexpr {
        name,
        kind,
        default,
    })
}

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

/// Classifies one parameter; `vars` are the kernel's type parameters (dtype variables).
pub fn param(arg: &FnArg, vars: &[Ident]) -> syn::Result<Param> {
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
    if kind == "Constexpr" {
        if mutable {
            return Err(syn::Error::new_spanned(
                &pt.pat,
                "a constexpr is fixed for the specialisation: drop `mut`",
            ));
        }
        return constexpr_param(name, seg);
    }
    let generic = single_generic(seg)?;
    match (kind.as_str(), generic) {
        ("Ptr" | "ConstPtr", g) => {
            let var = match g {
                Some(GenericArgument::Type(Type::Path(p))) => {
                    p.path.get_ident().filter(|id| vars.contains(id)).cloned()
                }
                _ => None,
            };
            let dtype = match (g, var) {
                (None, _) => PtrDtype::Any,
                (Some(_), Some(var)) => PtrDtype::Var { var, first: false },
                (Some(g), None) => PtrDtype::Fixed(dtype_expr(g)?),
            };
            Ok(Param::Ptr {
                name,
                mutable,
                dtype,
                constant: kind == "ConstPtr",
            })
        }
        ("Scalar", Some(g)) => Ok(Param::Scalar {
            name,
            mutable,
            dtype: dtype_expr(g)?,
        }),
        ("Scalar", None) => Ok(Param::AnyScalar { name, mutable }),
        ("DType", None) => Ok(Param::Factory {
            name,
            ty: pt.ty.clone(),
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
            } => {
                let span = name.span();
                let lit = syn::LitStr::new(&name.to_string(), span);
                let m = mutable.then(|| quote!(mut));
                let any = Ident::new(
                    if *constant {
                        "const_ptr_any"
                    } else {
                        "ptr_any"
                    },
                    span,
                );
                let method = if *constant { "const_ptr" } else { "ptr" };
                match dtype {
                    PtrDtype::Fixed(d) => decl(name, *mutable, method, d),
                    PtrDtype::Var { var, first: false } => {
                        decl(name, *mutable, method, &quote!(#var))
                    }
                    PtrDtype::Any => quote_spanned!(span=>
                        let #m #name: ::triton_metal::tl::Tensor = #k.#any(#lit);
                    ),
                    PtrDtype::Var { var, first: true } => quote_spanned!(span=>
                        let #m #name: ::triton_metal::tl::Tensor = #k.#any(#lit);
                        let #var: ::triton_metal::DType = #k.dtype_of(#lit);
                    ),
                }
            }
            Param::Scalar {
                name,
                mutable,
                dtype,
            } => decl(name, *mutable, "scalar", dtype),
            Param::AnyScalar { name, mutable } => {
                let span = name.span();
                let lit = syn::LitStr::new(&name.to_string(), span);
                let m = mutable.then(|| quote!(mut));
                quote_spanned!(span=>
                    let #m #name: ::triton_metal::tl::Tensor = #k.scalar_any(#lit);
                )
            }
            Param::Constexpr {
                name,
                kind,
                default,
            } => {
                let span = name.span();
                let lit = syn::LitStr::new(&name.to_string(), span);
                let ty = match kind {
                    CxKind::Int => quote!(i64),
                    CxKind::Bool => quote!(bool),
                    CxKind::Float => quote!(f64),
                    CxKind::Str => quote!(::std::string::String),
                    CxKind::DType => quote!(::triton_metal::DType),
                };
                let read = match (kind, default) {
                    (CxKind::Int, None) => quote_spanned!(span=> #k.constexpr(#lit)),
                    (CxKind::Int, Some(d)) => quote_spanned!(span=> #k.constexpr_or(#lit, #d)),
                    (_, None) => quote_spanned!(span=> #k.constexpr_as::<#ty>(#lit)),
                    (_, Some(d)) => quote_spanned!(span=> #k.constexpr_as_or::<#ty>(#lit, #d)),
                };
                if *kind == CxKind::Str {
                    // Bound as a `&str` (Copy, comparable with string literals).
                    let owned = hidden(&format!("__tm_cx_{name}"));
                    quote_spanned!(span=>
                        let #owned: #ty = #read;
                        let #name: &str = #owned.as_str();
                    )
                } else {
                    quote_spanned!(span=> let #name: #ty = #read;)
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
