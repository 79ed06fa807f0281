//! Triton's call forms: keyword arguments (`tl::load(p, mask = m, other = 0.0)`), optional
//! arguments left out (`tl::sum(x)`, `tl::dot(a, b)`), tuple shapes (`tl::zeros((M, N), ..)`),
//! rewritten to the builder's positional and chained forms.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use crate::scope::kwarg;

/// `tl::NAME` (any path ending in `tl::NAME`): the name and the span of the call's path.
pub fn tl_name(func: &Expr) -> Option<(String, Span)> {
    let Expr::Path(p) = func else { return None };
    let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
    match segs.as_slice() {
        [.., tl, name] if tl.ident == "tl" => Some((name.ident.to_string(), func.span())),
        _ => None,
    }
}

/// Triton's parameters of each function that takes optional or keyword arguments.
const SPECS: &[(&str, &[&str])] = &[
    (
        "load",
        &[
            "pointer",
            "mask",
            "other",
            "boundary_check",
            "padding_option",
        ],
    ),
    ("store", &["pointer", "value", "mask", "boundary_check"]),
    (
        "make_block_ptr",
        &[
            "base",
            "shape",
            "strides",
            "offsets",
            "block_shape",
            "order",
        ],
    ),
    ("advance", &["base", "offsets"]),
    (
        "make_tensor_descriptor",
        &["base", "shape", "strides", "block_shape", "padding_option"],
    ),
    ("sum", &["input", "axis", "keep_dims", "dtype"]),
    ("max", &["input", "axis", "return_indices", "keep_dims"]),
    ("min", &["input", "axis", "return_indices", "keep_dims"]),
    ("argmax", &["input", "axis", "keep_dims"]),
    ("argmin", &["input", "axis", "keep_dims"]),
    ("xor_sum", &["input", "axis", "keep_dims"]),
    (
        "dot",
        &["input", "other", "acc", "out_dtype", "input_precision"],
    ),
    ("cumsum", &["input", "axis", "reverse"]),
    ("cumprod", &["input", "axis", "reverse"]),
    ("sort", &["x", "dim", "descending"]),
    ("flip", &["x", "dim"]),
    ("cat", &["input", "other", "can_reorder"]),
    ("gather", &["src", "index", "axis"]),
    ("topk", &["x", "k", "dim", "descending"]),
    ("histogram", &["input", "num_bins", "mask"]),
    ("program_id", &["axis"]),
    ("num_programs", &["axis"]),
    ("arange", &["start", "end"]),
    ("zeros", &["shape", "dtype"]),
    ("full", &["shape", "value", "dtype"]),
    ("zeros_like", &["input"]),
    ("where_", &["condition", "x", "y"]),
    ("maximum", &["x", "y"]),
    ("minimum", &["x", "y"]),
    ("reshape", &["input", "shape"]),
    ("view", &["input", "shape"]),
    ("expand_dims", &["input", "axis"]),
    ("broadcast_to", &["input", "shape"]),
    ("permute", &["input", "dims"]),
    ("trans", &["input"]),
    ("reduce", &["input", "axis", "combine_fn", "keep_dims"]),
    (
        "associative_scan",
        &["input", "axis", "combine_fn", "reverse"],
    ),
    ("rand", &["seed", "offset"]),
    ("randn", &["seed", "offset"]),
    ("randint", &["seed", "offset"]),
    ("randint4x", &["seed", "offset"]),
    ("atomic_add", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_max", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_min", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_and", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_or", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_xor", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_xchg", &["pointer", "val", "mask", "sem", "scope"]),
    ("atomic_cas", &["pointer", "cmp", "val", "sem", "scope"]),
    ("cdiv", &["x", "div"]),
    ("clamp", &["x", "min", "max"]),
    ("cast", &["input", "dtype", "bitcast"]),
    ("fma", &["x", "y", "z"]),
    ("multiple_of", &["input", "values"]),
    ("max_contiguous", &["input", "values"]),
    ("static_assert", &["cond", "msg"]),
];

/// Methods of a tensor that Triton also calls with keyword arguments (`x.sum(axis = 0)`),
/// and the function each one is.
const METHODS: &[(&str, &str)] = &[
    ("sum", "sum"),
    ("max", "max"),
    ("min", "min"),
    ("argmax", "argmax"),
    ("argmin", "argmin"),
    ("xor_sum", "xor_sum"),
    ("cumsum", "cumsum"),
    ("cumprod", "cumprod"),
    ("to", "cast"),
    ("reshape", "reshape"),
    ("expand_dims", "expand_dims"),
    ("broadcast_to", "broadcast_to"),
    ("permute", "permute"),
    ("gather", "gather"),
    ("histogram", "histogram"),
];

struct Bound {
    name: String,
    span: Span,
    values: Vec<Option<Expr>>,
    params: &'static [&'static str],
}

impl Bound {
    fn get(&self, p: &str) -> Option<&Expr> {
        let i = self.params.iter().position(|q| *q == p)?;
        self.values[i].as_ref()
    }

    fn required(&self, p: &str) -> syn::Result<&Expr> {
        self.get(p).ok_or_else(|| {
            syn::Error::new(
                self.span,
                format!("`tl::{}` needs its `{p}` argument", self.name),
            )
        })
    }

    /// A `bool` argument that must be a literal (it selects a different op).
    fn flag(&self, p: &str) -> syn::Result<bool> {
        match self.get(p) {
            None => Ok(false),
            Some(Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Bool(b),
                ..
            })) => Ok(b.value),
            Some(e) => Err(syn::Error::new_spanned(
                e,
                format!("`{p}` must be `true` or `false` here (it chooses the operation)"),
            )),
        }
    }

    fn or(&self, p: &str, default: TokenStream) -> TokenStream {
        match self.get(p) {
            Some(e) => quote!(#e),
            None => default,
        }
    }

    /// A shape: Triton's tuple `(M, N)` becomes the array `[M, N]`.
    fn shape(&self, p: &str) -> syn::Result<TokenStream> {
        Ok(match self.required(p)? {
            Expr::Tuple(t) => {
                let elems = t.elems.iter();
                quote!([#(#elems),*])
            }
            e => quote!(#e),
        })
    }

    /// A list of index operands (`shape`, `strides`, `offsets`): Triton's tuple or list
    /// `(M, 0)` / `[M, 0]` becomes a Rust tuple, whose entries may mix tensors and integers.
    fn operands(&self, p: &str) -> syn::Result<TokenStream> {
        Ok(match self.required(p)? {
            Expr::Tuple(t) => {
                let elems = t.elems.iter();
                quote!((#(#elems,)*))
            }
            Expr::Array(a) => {
                let elems = a.elems.iter();
                quote!((#(#elems,)*))
            }
            e => quote!(#e),
        })
    }

    /// A list of constant dimensions (`block_shape`, `order`, `boundary_check`): a tuple,
    /// list or single integer becomes an array; `()` the empty list.
    fn dims(&self, p: &str) -> syn::Result<TokenStream> {
        let elems: Vec<&Expr> = match self.required(p)? {
            Expr::Tuple(t) => t.elems.iter().collect(),
            Expr::Array(a) => a.elems.iter().collect(),
            e @ Expr::Lit(_) => vec![e],
            e => return Ok(quote!(#e)),
        };
        Ok(if elems.is_empty() {
            quote!([0i64; 0])
        } else {
            quote!([#(#elems),*])
        })
    }

    /// An error when `mask`/`other` come with a block pointer's keyword arguments.
    fn no_mask(&self, block_kw: &str) -> syn::Result<()> {
        match self.get("mask").or_else(|| self.get("other")) {
            Some(m) => Err(syn::Error::new_spanned(
                m,
                format!(
                    "`mask` and `other` cannot be given with `{block_kw}`: a block pointer \
                     takes `boundary_check` and `padding_option` instead (Triton's rule)"
                ),
            )),
            None => Ok(()),
        }
    }

    /// The axis argument of a reduction: `None` when left out, with `keep_dims`.
    fn axis(&self) -> syn::Result<TokenStream> {
        let axis = self.or("axis", quote!(::core::option::Option::<i64>::None));
        Ok(if self.flag("keep_dims")? {
            quote!(::triton_metal::tl::keep_dims(#axis))
        } else {
            axis
        })
    }
}

fn bind(
    name: &str,
    span: Span,
    params: &'static [&'static str],
    args: Vec<Expr>,
) -> syn::Result<Bound> {
    let mut values: Vec<Option<Expr>> = vec![None; params.len()];
    let mut positional = 0;
    let mut seen_kw = false;
    for a in args {
        if let Some((id, v)) = kwarg(&a) {
            seen_kw = true;
            let key = id.to_string();
            let Some(i) = params.iter().position(|p| *p == key) else {
                return Err(syn::Error::new_spanned(
                    id,
                    format!(
                        "`tl::{name}` has no argument `{key}` here; its arguments are {}",
                        params
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            };
            if values[i].is_some() {
                return Err(syn::Error::new_spanned(
                    id,
                    format!("`{key}` is given twice"),
                ));
            }
            values[i] = Some(v.clone());
        } else {
            if seen_kw {
                return Err(syn::Error::new_spanned(
                    a,
                    "a positional argument cannot follow a keyword argument",
                ));
            }
            if positional >= params.len() {
                return Err(syn::Error::new_spanned(
                    a,
                    format!("`tl::{name}` takes at most {} arguments", params.len()),
                ));
            }
            values[positional] = Some(a);
            positional += 1;
        }
    }
    Ok(Bound {
        name: name.to_string(),
        span,
        values,
        params,
    })
}

/// The builder form of a `tl::` call, or `None` to leave the call as written.
pub fn call(c: &syn::ExprCall) -> syn::Result<Option<TokenStream>> {
    let has_kw = c.args.iter().any(|a| kwarg(a).is_some());
    let Some((name, span)) = tl_name(&c.func) else {
        if let Some(a) = c.args.iter().find(|a| kwarg(a).is_some()) {
            return Err(syn::Error::new_spanned(
                a,
                "keyword arguments work with `tl::` functions; pass this one by position",
            ));
        }
        return Ok(None);
    };
    let Some((_, params)) = SPECS.iter().find(|(n, _)| *n == name) else {
        if let Some(a) = c.args.iter().find(|a| kwarg(a).is_some()) {
            return Err(syn::Error::new_spanned(
                a,
                format!("`tl::{name}` takes no keyword arguments; pass them by position"),
            ));
        }
        return Ok(None);
    };
    let args: Vec<Expr> = c.args.iter().cloned().collect();
    // Calls already in the builder's own form are left alone.
    // A shape or axes given as Triton's tuple needs rewriting into an array.
    let shape_at = match name.as_str() {
        "zeros" | "full" => Some(0),
        "expand_dims" | "reshape" | "view" | "broadcast_to" | "permute" => Some(1),
        _ => None,
    };
    let tuple_axes = shape_at.is_some_and(|i| matches!(args.get(i), Some(Expr::Tuple(_))));
    if !has_kw
        && args.len() == params.len()
        && !matches!(
            name.as_str(),
            "load" | "store" | "make_block_ptr" | "advance" | "make_tensor_descriptor"
        )
        && !tuple_axes
    {
        return Ok(None);
    }
    let b = bind(&name, span, params, args)?;
    emit(&b).map(Some)
}

/// `x.sum(axis = 0)` and the like: the function form with `x` first.
pub fn method_call(m: &syn::ExprMethodCall) -> syn::Result<Option<TokenStream>> {
    if !m.args.iter().any(|a| kwarg(a).is_some()) {
        return Ok(descriptor_access(m));
    }
    let method = m.method.to_string();
    let Some((_, name)) = METHODS.iter().find(|(n, _)| *n == method) else {
        return Err(syn::Error::new_spanned(
            &m.method,
            format!("`.{method}(..)` takes no keyword arguments; pass them by position"),
        ));
    };
    let params = SPECS
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| *p)
        .unwrap_or(&[]);
    let mut args = vec![(*m.receiver).clone()];
    args.extend(m.args.iter().cloned());
    let b = bind(name, m.method.span(), params, args)?;
    emit(&b).map(Some)
}

/// `desc.load([x, 0])`, `desc.store([x, 0], v)`: a tensor descriptor's offsets, a list
/// whose entries may mix tensors and integers, become a tuple.
fn descriptor_access(m: &syn::ExprMethodCall) -> Option<TokenStream> {
    let method = m.method.to_string();
    if !matches!(method.as_str(), "load" | "store") {
        return None;
    }
    let Some(Expr::Array(a)) = m.args.first() else {
        return None;
    };
    let (receiver, name, elems) = (&m.receiver, &m.method, a.elems.iter());
    let rest = m.args.iter().skip(1);
    Some(quote!(#receiver.#name((#(#elems,)*) #(, #rest)*)))
}

fn emit(b: &Bound) -> syn::Result<TokenStream> {
    let span = b.span;
    let tl = quote_spanned!(span=> ::triton_metal::tl);
    let f = |n: &str| Ident::new(n, span);
    let positional = |names: &[&str]| -> syn::Result<TokenStream> {
        let args = names
            .iter()
            .map(|p| b.required(p).map(|e| quote!(#e)))
            .collect::<syn::Result<Vec<_>>>()?;
        let func = f(&b.name);
        Ok(quote_spanned!(span=> #tl::#func(#(#args),*)))
    };
    let masked = |call: TokenStream| -> TokenStream {
        match b.get("mask") {
            Some(m) => quote_spanned!(span=> #call.mask(#m)),
            None => call,
        }
    };
    // An atomic's `sem=` and `scope=` (Triton's memory ordering and its scope).
    let ordered = |mut call: TokenStream| -> TokenStream {
        if let Some(s) = b.get("sem") {
            call = quote_spanned!(span=> #call.sem(#s));
        }
        if let Some(s) = b.get("scope") {
            call = quote_spanned!(span=> #call.scope(#s));
        }
        call
    };
    Ok(match b.name.as_str() {
        "load" if b.get("boundary_check").is_some() || b.get("padding_option").is_some() => {
            b.no_mask("boundary_check`/`padding_option")?;
            let p = b.required("pointer")?;
            let check = match b.get("boundary_check") {
                Some(_) => b.dims("boundary_check")?,
                None => quote!([0i64; 0]),
            };
            let pad = b.or("padding_option", quote!(""));
            quote_spanned!(span=> #tl::load_block(#p, #check, #pad))
        }
        "store" if b.get("boundary_check").is_some() => {
            b.no_mask("boundary_check")?;
            let (p, v) = (b.required("pointer")?, b.required("value")?);
            let check = b.dims("boundary_check")?;
            quote_spanned!(span=> #tl::store_block(#p, #v, #check))
        }
        "make_block_ptr" => {
            let base = b.required("base")?;
            let (shape, strides, offsets) = (
                b.operands("shape")?,
                b.operands("strides")?,
                b.operands("offsets")?,
            );
            let (block, order) = (b.dims("block_shape")?, b.dims("order")?);
            quote_spanned!(span=> #tl::make_block_ptr(#base, #shape, #strides, #offsets, #block, #order))
        }
        "advance" => {
            let (base, offsets) = (b.required("base")?, b.operands("offsets")?);
            quote_spanned!(span=> #tl::advance(#base, #offsets))
        }
        "make_tensor_descriptor" => {
            let base = b.required("base")?;
            let (shape, strides) = (b.operands("shape")?, b.operands("strides")?);
            let block = b.dims("block_shape")?;
            let d =
                quote_spanned!(span=> #tl::make_tensor_descriptor(#base, #shape, #strides, #block));
            match b.get("padding_option") {
                Some(p) => quote_spanned!(span=> #d.padding_option(#p)),
                None => d,
            }
        }
        "load" => {
            let p = b.required("pointer")?;
            let mut t = masked(quote_spanned!(span=> #tl::load(#p)));
            if let Some(o) = b.get("other") {
                t = quote_spanned!(span=> #t.other(#o));
            }
            t
        }
        "store" => {
            let (p, v) = (b.required("pointer")?, b.required("value")?);
            masked(quote_spanned!(span=> #tl::store(#p, #v)))
        }
        "sum" if b.get("dtype").is_some() => {
            let (x, d) = (b.required("input")?, b.required("dtype")?);
            let axis = b.axis()?;
            quote_spanned!(span=> #tl::sum_dtype(#x, #axis, #d))
        }
        "sum" | "argmax" | "argmin" | "xor_sum" | "max" | "min" => {
            let x = b.required("input")?;
            let indices = b.params.contains(&"return_indices") && b.flag("return_indices")?;
            let func = if indices {
                f(&format!("{}_with_indices", b.name))
            } else {
                f(&b.name)
            };
            let axis = b.axis()?;
            quote_spanned!(span=> #tl::#func(#x, #axis))
        }
        "dot" => {
            let (x, y) = (b.required("input")?, b.required("other")?);
            let acc = b.or("acc", quote!(::core::option::Option::None));
            if let Some(p) = b.get("input_precision") {
                let d = match b.get("out_dtype") {
                    Some(d) => quote_spanned!(span=> ::core::option::Option::Some(#d)),
                    None => quote_spanned!(span=> ::core::option::Option::None),
                };
                return Ok(quote_spanned!(span=> #tl::dot_with(#x, #y, #acc, #d, #p)));
            }
            match b.get("out_dtype") {
                Some(d) => quote_spanned!(span=> #tl::dot_out(#x, #y, #acc, #d)),
                None => quote_spanned!(span=> #tl::dot(#x, #y, #acc)),
            }
        }
        "cumsum" => {
            let x = b.required("input")?;
            let axis = b.or("axis", quote!(0));
            let func = f(if b.flag("reverse")? {
                "cumsum_reverse"
            } else {
                "cumsum"
            });
            quote_spanned!(span=> #tl::#func(#x, #axis))
        }
        "cumprod" => {
            let x = b.required("input")?;
            let axis = b.or("axis", quote!(0));
            let func = f(if b.flag("reverse")? {
                "cumprod_reverse"
            } else {
                "cumprod"
            });
            quote_spanned!(span=> #tl::#func(#x, #axis))
        }
        "sort" => {
            let x = b.required("x")?;
            let dim = b.or("dim", quote!(-1));
            let desc = b.or("descending", quote!(false));
            quote_spanned!(span=> #tl::sort(#x, #dim, #desc))
        }
        "flip" => {
            let x = b.required("x")?;
            let dim = b.or("dim", quote!(-1));
            quote_spanned!(span=> #tl::flip(#x, #dim))
        }
        "topk" => {
            let (x, k) = (b.required("x")?, b.required("k")?);
            let dim = b.or("dim", quote!(-1));
            let desc = b.or("descending", quote!(true));
            quote_spanned!(span=> #tl::topk(#x, #k, #dim, #desc))
        }
        "histogram" => {
            let (x, n) = (b.required("input")?, b.required("num_bins")?);
            let m = match b.get("mask") {
                Some(m) => quote_spanned!(span=> ::core::option::Option::Some(#m)),
                None => quote_spanned!(span=> ::core::option::Option::None),
            };
            quote_spanned!(span=> #tl::histogram(#x, #n, #m))
        }
        "cat" => {
            let (x, y) = (b.required("input")?, b.required("other")?);
            let r = b.or("can_reorder", quote!(false));
            quote_spanned!(span=> #tl::cat(#x, #y, #r))
        }
        "expand_dims" if matches!(b.get("axis"), Some(Expr::Tuple(_))) => {
            let (x, axes) = (b.required("input")?, b.shape("axis")?);
            quote_spanned!(span=> #tl::expand_dims_axes(#x, #axes))
        }
        "zeros" => {
            let (shape, d) = (b.shape("shape")?, b.required("dtype")?);
            quote_spanned!(span=> #tl::zeros(#shape, #d))
        }
        "full" => {
            let (shape, v, d) = (
                b.shape("shape")?,
                b.required("value")?,
                b.required("dtype")?,
            );
            quote_spanned!(span=> #tl::full(#shape, #v, #d))
        }
        "reshape" | "view" | "broadcast_to" => {
            let (x, shape) = (b.required("input")?, b.shape("shape")?);
            let func = f(if b.name == "view" { "reshape" } else { &b.name });
            quote_spanned!(span=> #tl::#func(#x, #shape))
        }
        "permute" => {
            let (x, dims) = (b.required("input")?, b.shape("dims")?);
            quote_spanned!(span=> #tl::permute(#x, #dims))
        }
        "reduce" => {
            let (x, c) = (b.required("input")?, b.required("combine_fn")?);
            let axis = b.axis()?;
            quote_spanned!(span=> #tl::reduce(#x, #axis, #c))
        }
        "associative_scan" => {
            let (x, axis, c) = (
                b.required("input")?,
                b.required("axis")?,
                b.required("combine_fn")?,
            );
            let rev = b.flag("reverse")?;
            quote_spanned!(span=> #tl::associative_scan(#x, #axis, #rev, #c))
        }
        "atomic_add" | "atomic_max" | "atomic_min" | "atomic_and" | "atomic_or" | "atomic_xor"
        | "atomic_xchg" => ordered(masked(positional(&["pointer", "val"])?)),
        "atomic_cas" => ordered(positional(&["pointer", "cmp", "val"])?),
        "cast" => {
            let (x, d) = (b.required("input")?, b.required("dtype")?);
            let func = f(if b.flag("bitcast")? {
                "bitcast"
            } else {
                "cast"
            });
            quote_spanned!(span=> #tl::#func(#x, #d))
        }
        _ => positional(b.params)?,
    })
}
