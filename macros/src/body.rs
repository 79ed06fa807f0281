//! The kernel body: control flow, early returns, operators and keyword arguments rewritten
//! onto the builder DSL.

use proc_macro2::TokenStream;
use quote::quote;

use crate::sig::Param;

/// The statements of a kernel's `tl::jit` closure.
pub fn kernel_body(block: &syn::Block, _params: &[Param]) -> syn::Result<TokenStream> {
    let stmts = &block.stmts;
    Ok(quote!(#(#stmts)*))
}

/// The body of a helper function.
pub fn helper_body(block: &syn::Block, _sig: &syn::Signature) -> syn::Result<TokenStream> {
    let stmts = &block.stmts;
    Ok(quote!(#(#stmts)*))
}
