//! `#[jit]`: Triton-style kernels written as plain Rust functions, expanded onto
//! `triton_metal::tl` (the builder DSL). Use it through `triton_metal::jit`, whose
//! documentation is the guide.

use proc_macro::TokenStream;
use quote::{quote, quote_spanned};
use syn::{parse_macro_input, ItemFn, ReturnType, Type};

mod body;
mod calls;
mod scope;
mod sig;

/// Turns a function into a kernel factory (or, for a helper, a function the kernel inlines).
/// See `triton_metal::jit` for the guide.
#[proc_macro_attribute]
pub fn jit(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = proc_macro2::TokenStream::from(attr);
    let f = parse_macro_input!(item as ItemFn);
    match kernel_name(attr).and_then(|name| expand_named(f, name)) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn is_tensor(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Tensor"),
        Type::Reference(r) => is_tensor(&r.elem),
        _ => false,
    }
}

/// `#[jit]` or `#[jit(name = "kernel_name")]`: the kernel's name when it differs from the
/// function's.
fn kernel_name(attr: proc_macro2::TokenStream) -> syn::Result<Option<syn::LitStr>> {
    if attr.is_empty() {
        return Ok(None);
    }
    let help = "`#[jit]` takes nothing or `name = \"kernel_name\"`";
    let a: syn::MetaNameValue =
        syn::parse2(attr.clone()).map_err(|_| syn::Error::new_spanned(&attr, help))?;
    match a.value {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) if a.path.is_ident("name") => Ok(Some(s)),
        _ => Err(syn::Error::new_spanned(attr, help)),
    }
}

const GENERIC_HELP: &str = "a kernel's type parameters are dtype variables without bounds \
(`fn k<T>(x: Ptr<T>, y: Ptr<T>)`: `T` is the first such pointer's argument dtype); for \
one kernel per dtype given when it is made, take `dtype: DType` and write `Ptr<dtype>`";

/// The kernel's type parameters: dtype variables (`fn k<T>(x: Ptr<T>)`).
fn dtype_vars(g: &syn::Generics) -> syn::Result<Vec<syn::Ident>> {
    if let Some(w) = &g.where_clause {
        return Err(syn::Error::new_spanned(w, GENERIC_HELP));
    }
    g.params
        .iter()
        .map(|p| match p {
            syn::GenericParam::Type(t) if t.bounds.is_empty() && t.default.is_none() => {
                Ok(t.ident.clone())
            }
            other => Err(syn::Error::new_spanned(other, GENERIC_HELP)),
        })
        .collect()
}

/// Marks the first `Ptr<T>` of each dtype variable `T` (it binds `T`); a variable no
/// pointer takes is an error.
fn bind_dtype_vars(
    params: &mut [sig::Param],
    vars: &[syn::Ident],
    g: &syn::Generics,
) -> syn::Result<()> {
    let mut bound: Vec<&syn::Ident> = Vec::new();
    for p in params.iter() {
        match p {
            sig::Param::Ptr {
                dtype: sig::PtrDtype::Var { var, .. },
                ..
            } => bound.push(var),
            sig::Param::Scalar { name, dtype, .. } => {
                if let Some(v) = vars
                    .iter()
                    .find(|v| !bound.contains(v) && dtype.to_string() == v.to_string())
                {
                    return Err(syn::Error::new_spanned(
                        name,
                        format!(
                            "`{v}` is bound by the first pointer `Ptr<{v}>`: declare that \
                             pointer before this scalar"
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    for v in vars {
        let first = params.iter_mut().find_map(|p| match p {
            sig::Param::Ptr {
                dtype: sig::PtrDtype::Var { var, first },
                ..
            } if var == v => Some(first),
            _ => None,
        });
        match first {
            Some(f) => *f = true,
            None => {
                return Err(syn::Error::new_spanned(
                    g,
                    format!("dtype variable `{v}` is the dtype of no pointer: {GENERIC_HELP}"),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) fn expand(f: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    expand_named(f, None)
}

fn expand_named(
    f: ItemFn,
    kernel_name: Option<syn::LitStr>,
) -> syn::Result<proc_macro2::TokenStream> {
    let s = &f.sig;
    if let Some(t) = &s.asyncness {
        return Err(syn::Error::new_spanned(t, "a kernel cannot be `async`"));
    }
    if let Some(t) = &s.constness {
        return Err(syn::Error::new_spanned(t, "a kernel cannot be `const`"));
    }
    if let Some(t) = &s.unsafety {
        return Err(syn::Error::new_spanned(
            t,
            "a kernel has nothing unsafe: drop `unsafe`",
        ));
    }
    if let Some(v) = &s.variadic {
        return Err(syn::Error::new_spanned(v, "a kernel cannot be variadic"));
    }
    // A helper (Triton's `@triton.jit` function called from a kernel) takes tensors or
    // returns something; a kernel does neither.
    let helper = !matches!(s.output, ReturnType::Default)
        || s.inputs
            .iter()
            .any(|a| matches!(a, syn::FnArg::Typed(t) if is_tensor(&t.ty)));
    if helper {
        if let Some(n) = kernel_name {
            return Err(syn::Error::new_spanned(n, "a helper has no kernel name"));
        }
        return helper_fn(f);
    }
    let vars = dtype_vars(&s.generics)?;
    let mut params = s
        .inputs
        .iter()
        .map(|a| sig::param(a, &vars))
        .collect::<syn::Result<Vec<_>>>()?;
    bind_dtype_vars(&mut params, &vars, &s.generics)?;
    let k = sig::hidden("__tm_k");
    let decls = params.iter().map(|p| p.declare(&k));
    let factory_args = params.iter().filter_map(|p| p.factory_arg());
    let body = body::kernel_body(&f.block, &params)?;
    let (attrs, vis, name) = (&f.attrs, &f.vis, &s.ident);
    let name_lit = kernel_name.unwrap_or_else(|| syn::LitStr::new(&name.to_string(), name.span()));
    let span = name.span();
    let jit = quote_spanned!(span=> ::triton_metal::tl::jit);
    Ok(quote! {
        #(#attrs)*
        #[allow(non_snake_case, unused_mut, unused_variables, unused_assignments, unused_braces, clippy::all)]
        #vis fn #name(#(#factory_args),*) -> ::triton_metal::Result<::triton_metal::tl::JitKernel> {
            #jit(#name_lit, move |#k: &mut ::triton_metal::tl::KernelBuilder| {
                #(#decls)*
                #body
            })
        }
    })
}

fn helper_fn(f: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let body = body::helper_body(&f.block, &f.sig)?;
    let (attrs, vis, sig) = (&f.attrs, &f.vis, &f.sig);
    let span = f.sig.ident.span();
    let allow = quote_spanned!(span=> #[allow(non_snake_case, unused_mut, unused_variables, unused_assignments, unused_braces, clippy::all)]);
    Ok(quote! {
        #(#attrs)*
        #allow
        #vis #sig {
            #body
        }
    })
}

#[cfg(test)]
mod tests;
