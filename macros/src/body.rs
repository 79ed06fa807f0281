//! The kernel body: control flow, early returns, operators and keyword arguments rewritten
//! onto the builder DSL (`triton_metal::tl`, with `tl::expand` for Python's operators).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Ident, Stmt};

use crate::calls;
use crate::scope::{self, pat_idents};
use crate::sig::{hidden, Param};

/// The statements of a kernel's `tl::jit` closure.
pub fn kernel_body(block: &Block, _params: &[Param]) -> syn::Result<TokenStream> {
    body(block)
}

/// The body of a helper function.
pub fn helper_body(block: &Block, _sig: &syn::Signature) -> syn::Result<TokenStream> {
    body(block)
}

fn body(block: &Block) -> syn::Result<TokenStream> {
    let mut block = block.clone();
    block.stmts = lift_returns(std::mem::take(&mut block.stmts))?;
    let mut rw = Rewriter::default();
    rw.block(&mut block, true);
    if let Some(e) = rw.errors.into_iter().reduce(|mut a, b| {
        a.combine(b);
        a
    }) {
        return Err(e);
    }
    let stmts = &block.stmts;
    Ok(quote!(#(#stmts)*))
}

// ---- early returns ------------------------------------------------------------------------

fn is_return(s: &Stmt) -> Option<&syn::ExprReturn> {
    match s {
        Stmt::Expr(Expr::Return(r), _) => Some(r),
        _ => None,
    }
}

fn contains_return(e: &Expr) -> bool {
    struct Find(bool);
    impl<'a> Visit<'a> for Find {
        fn visit_expr_return(&mut self, _: &'a syn::ExprReturn) {
            self.0 = true;
        }
        fn visit_expr_closure(&mut self, _: &'a syn::ExprClosure) {}
        fn visit_item(&mut self, _: &'a syn::Item) {}
    }
    let mut f = Find(false);
    f.visit_expr(e);
    f.0
}

/// True when control never reaches the end of `stmts` (it ends in `return`, or in an `if`
/// whose branches all do).
fn diverges(stmts: &[Stmt]) -> bool {
    match stmts.last() {
        Some(s) if is_return(s).is_some() => true,
        Some(Stmt::Expr(Expr::If(i), _)) => match &i.else_branch {
            Some((_, e)) => diverges(&i.then_branch.stmts) && diverges(&else_stmts(e)),
            None => false,
        },
        _ => false,
    }
}

fn else_stmts(e: &Expr) -> Vec<Stmt> {
    match e {
        Expr::Block(b) => b.block.stmts.clone(),
        other => vec![Stmt::Expr(other.clone(), None)],
    }
}

/// Triton's early return: `if c { ..; return; } rest` becomes `if c { .. } else { rest }`
/// (the rest goes into every branch that does not return), recursively; a final
/// `return e;` becomes the block's value `e`.
fn lift_returns(stmts: Vec<Stmt>) -> syn::Result<Vec<Stmt>> {
    let mut out = Vec::new();
    let mut it = stmts.into_iter();
    while let Some(s) = it.next() {
        if let Some(r) = is_return(&s) {
            if let Some(next) = it.next() {
                return Err(syn::Error::new_spanned(
                    next,
                    "this code never runs: it follows a `return`",
                ));
            }
            if let Some(e) = &r.expr {
                out.push(Stmt::Expr((**e).clone(), None));
            }
            return Ok(out);
        }
        if let Stmt::Expr(Expr::If(i), _) = &s {
            if contains_return(&Expr::If(i.clone())) {
                let rest: Vec<Stmt> = it.collect();
                out.push(Stmt::Expr(Expr::If(lift_if(i.clone(), rest)?), None));
                return Ok(out);
            }
        }
        out.push(s);
    }
    Ok(out)
}

fn branch(mut stmts: Vec<Stmt>, rest: &[Stmt]) -> syn::Result<Vec<Stmt>> {
    if !diverges(&stmts) {
        stmts.extend(rest.iter().cloned());
    }
    lift_returns(stmts)
}

fn lift_if(mut i: syn::ExprIf, rest: Vec<Stmt>) -> syn::Result<syn::ExprIf> {
    let then = std::mem::take(&mut i.then_branch.stmts);
    i.then_branch.stmts = branch(then, &rest)?;
    let span = i.if_token.span;
    let (else_token, else_expr) = match i.else_branch.take() {
        Some((t, e)) => (t, else_stmts(&e)),
        None => (syn::token::Else(span), Vec::new()),
    };
    let block = Block {
        brace_token: syn::token::Brace(span),
        stmts: branch(else_expr, &rest)?,
    };
    let else_block = Expr::Block(syn::ExprBlock {
        attrs: Vec::new(),
        label: None,
        block,
    });
    i.else_branch = Some((else_token, Box::new(else_block)));
    Ok(i)
}

// ---- the rewriter -------------------------------------------------------------------------

#[derive(Default)]
struct Rewriter {
    errors: Vec<syn::Error>,
    closures: usize,
    /// The next `if` is the last thing its kernel runs: the values it assigns are dead after.
    dead_if: bool,
}

const LOOP_HELP: &str = "`loop` is not supported in a kernel: write `while cond { .. }` (a \
runtime loop carrying the variables it assigns), `for i in tl::range(..)`, or \
`for i in tl::static_range(..)` (unrolled)";

const BREAK_HELP: &str = "`break` and `continue` are not supported in a kernel (nor in \
Triton): fold the condition into the loop's condition or into a mask";

const RETURN_HELP: &str = "`return` works at the kernel's top level and inside `if`/`else` \
there (the rest of the kernel moves into the other branch, as in Triton); not inside loops, \
blocks or expressions";

impl Rewriter {
    fn error(&mut self, tokens: impl quote::ToTokens, msg: &str) {
        self.errors.push(syn::Error::new_spanned(tokens, msg));
    }

    /// Rewrites `b`; `tail_dead`: the values its final `if` assigns are never read.
    fn block(&mut self, b: &mut Block, tail_dead: bool) {
        let n = b.stmts.len();
        for (i, s) in b.stmts.iter_mut().enumerate() {
            if tail_dead && i + 1 == n && matches!(s, Stmt::Expr(Expr::If(_), _)) {
                self.dead_if = true;
            }
            self.visit_stmt_mut(s);
        }
    }

    fn if_expr(&mut self, i: &mut syn::ExprIf, dead: bool) -> TokenStream {
        let mut carried = scope::assigned_in_block(&i.then_branch, Vec::new());
        if let Some((_, e)) = &i.else_branch {
            for id in scope::assigned_in_expr(e, Vec::new()) {
                if !carried.contains(&id) {
                    carried.push(id);
                }
            }
        }
        self.visit_expr_mut(&mut i.cond);
        self.block(&mut i.then_branch, dead);
        let else_stmts = match &mut i.else_branch {
            Some((_, e)) => match &mut **e {
                Expr::Block(b) => {
                    self.block(&mut b.block, dead);
                    let s = &b.block.stmts;
                    quote!(#(#s)*)
                }
                other => {
                    self.dead_if = dead;
                    self.visit_expr_mut(other);
                    quote!(#other)
                }
            },
            None => TokenStream::new(),
        };
        let then_stmts = &i.then_branch.stmts;
        let then_stmts = quote!(#(#then_stmts)*);
        let cond = &i.cond;
        let span = i.if_token.span;
        let if_ = quote_spanned!(span=> ::triton_metal::tl::expand::if_);
        if carried.is_empty() {
            return quote_spanned!(span=> { #if_(#cond, || { #then_stmts }, || { #else_stmts }) });
        }
        let rebind = {
            let pat = tuple(&carried, |v| quote!(mut #v));
            let init = tuple(&carried, |v| quote!(::triton_metal::tl::expand::carry(&#v)));
            quote!(let #pat = #init;)
        };
        if dead {
            return quote_spanned!(span=> {
                #if_(#cond, || { #rebind #then_stmts }, || { #rebind #else_stmts })
            });
        }
        let vars = tuple(&carried, |v| quote!(#v));
        let (value, yielded) = (hidden("__tm_value"), hidden("__tm_carried"));
        // The call carries the `if`'s span: `tl::if_` records that line.
        quote_spanned!(span=> {
            let (#value, #yielded) = #if_(
                #cond,
                || { #rebind ({ #then_stmts }, #vars) },
                || { #rebind ({ #else_stmts }, #vars) },
            );
            #vars = #yielded;
            #value
        })
    }

    fn for_expr(&mut self, f: &mut syn::ExprForLoop) -> Option<TokenStream> {
        let Expr::Call(call) = &mut *f.expr else {
            visit_mut::visit_expr_for_loop_mut(self, f);
            return None;
        };
        let kind = calls::tl_name(&call.func).map(|(n, _)| n);
        match kind.as_deref() {
            Some("range") => {}
            Some("static_range") => {
                if let Some(t) = self.range_call(call, "static_range") {
                    *f.expr = Expr::Verbatim(t);
                }
                self.visit_pat_mut(&mut f.pat);
                self.block(&mut f.body, false);
                return None;
            }
            _ => {
                visit_mut::visit_expr_for_loop_mut(self, f);
                return None;
            }
        }
        let carried = scope::assigned_in_block(&f.body, pat_idents(&f.pat));
        let range = self.range_call(call, "range")?;
        self.block(&mut f.body, false);
        let (pat, body) = (&f.pat, &f.body.stmts);
        let span = f.for_token.span;
        if carried.is_empty() {
            return Some(quote_spanned!(span=> { #range.for_each(|#pat| { #(#body)* }); }));
        }
        let vars = tuple(&carried, |v| quote!(#v));
        let muts = tuple(&carried, |v| quote!(mut #v));
        Some(quote_spanned!(span=> {
            #vars = #range.fold(#vars, |#pat, #muts| { { #(#body)* }; #vars });
        }))
    }

    /// `tl::range(hi)`, `tl::range(lo, hi)`, `tl::range(lo, hi, step)` as a three-argument call.
    fn range_call(&mut self, call: &mut syn::ExprCall, name: &str) -> Option<TokenStream> {
        for a in call.args.iter_mut() {
            self.visit_expr_mut(a);
        }
        if let Some(a) = call.args.iter().find(|a| scope::kwarg(a).is_some()) {
            self.error(
                a,
                &format!("`tl::{name}` takes `(end)`, `(start, end)` or `(start, end, step)`"),
            );
            return None;
        }
        let a: Vec<&Expr> = call.args.iter().collect();
        let (lo, hi, step) = match a.as_slice() {
            [hi] => (quote!(0), quote!(#hi), quote!(1)),
            [lo, hi] => (quote!(#lo), quote!(#hi), quote!(1)),
            [lo, hi, step] => (quote!(#lo), quote!(#hi), quote!(#step)),
            _ => {
                self.error(
                    &*call,
                    &format!("`tl::{name}` takes `(end)`, `(start, end)` or `(start, end, step)`"),
                );
                return None;
            }
        };
        let span = call.func.span();
        let f = Ident::new(name, span);
        Some(quote_spanned!(span=> ::triton_metal::tl::#f(#lo, #hi, #step)))
    }

    fn while_expr(&mut self, w: &mut syn::ExprWhile) -> TokenStream {
        let carried = scope::assigned_in_block(&w.body, Vec::new());
        self.visit_expr_mut(&mut w.cond);
        self.block(&mut w.body, false);
        let (cond, body) = (&w.cond, &w.body.stmts);
        let span = w.while_token.span;
        let vars = tuple(&carried, |v| quote!(#v));
        let muts = tuple(&carried, |v| quote!(mut #v));
        let call = quote_spanned!(span=> ::triton_metal::tl::while_loop(#vars, |#vars| #cond, |#muts| { { #(#body)* }; #vars }));
        if carried.is_empty() {
            quote!({ #call; })
        } else {
            quote!({ #vars = #call; })
        }
    }

    fn binary(&mut self, b: &mut syn::ExprBinary) -> Option<TokenStream> {
        use syn::BinOp::*;
        let name = match b.op {
            Lt(_) => "lt",
            Le(_) => "le",
            Gt(_) => "gt",
            Ge(_) => "ge",
            Eq(_) => "eq",
            Ne(_) => "ne",
            And(_) => "and",
            Or(_) => "or",
            _ => return None,
        };
        self.visit_expr_mut(&mut b.left);
        self.visit_expr_mut(&mut b.right);
        let span = b.op.span();
        let f = Ident::new(name, span);
        let (l, r) = (&b.left, &b.right);
        Some(if matches!(b.op, And(_) | Or(_)) {
            quote_spanned!(span=> ::triton_metal::tl::expand::#f(#l, || #r))
        } else {
            quote_spanned!(span=> ::triton_metal::tl::expand::#f(#l, #r))
        })
    }

    /// Triton's `x.dtype` (a tensor's dtype) and `x_ptr.dtype.element_ty` (a pointer's
    /// element dtype); other fields are Rust's.
    fn dtype_attr(&mut self, f: &mut syn::ExprField) -> Option<TokenStream> {
        let member =
            |m: &syn::Member, name: &str| matches!(m, syn::Member::Named(id) if id == name);
        let (base, func) = match &mut *f.base {
            Expr::Field(inner)
                if member(&f.member, "element_ty") && member(&inner.member, "dtype") =>
            {
                (&mut inner.base, "element_ty")
            }
            _ if member(&f.member, "dtype") => (&mut f.base, "dtype"),
            _ => {
                visit_mut::visit_expr_field_mut(self, f);
                return None;
            }
        };
        self.visit_expr_mut(base);
        let span = f.member.span();
        let func = Ident::new(func, span);
        Some(quote_spanned!(span=> ::triton_metal::tl::expand::#func(#base)))
    }

    fn check_closure(&mut self, c: &syn::ExprClosure) {
        let params = c.inputs.iter().flat_map(pat_idents).collect();
        let outer = scope::assigned_in_expr(&c.body, params);
        if let Some(id) = outer.first() {
            self.error(
                id,
                &format!(
                    "a closure in a kernel cannot assign `{id}`, declared outside it: return \
                     the new value from the closure instead, or write the loop or branch \
                     directly (`for`, `while`, `if` carry assigned variables)"
                ),
            );
        }
    }
}

/// A tuple of the carried variables (nested in groups of 8, the largest tuple a carry can
/// be), or the variable itself when there is one.
fn tuple(vars: &[Ident], f: impl Fn(&Ident) -> TokenStream + Copy) -> TokenStream {
    match vars.len() {
        1 => f(&vars[0]),
        n if n <= 8 => {
            let items = vars.iter().map(f);
            quote!((#(#items,)*))
        }
        _ => {
            let groups = vars.chunks(8).map(|c| tuple(c, f));
            quote!((#(#groups,)*))
        }
    }
}

impl VisitMut for Rewriter {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        let dead = std::mem::take(&mut self.dead_if);
        let new = match e {
            Expr::If(i) if !matches!(*i.cond, Expr::Let(_)) => Some(self.if_expr(i, dead)),
            Expr::ForLoop(f) => self.for_expr(f),
            Expr::While(w) if !matches!(*w.cond, Expr::Let(_)) => Some(self.while_expr(w)),
            Expr::Loop(l) => {
                self.error(l.loop_token, LOOP_HELP);
                None
            }
            Expr::Break(b) => {
                self.error(b, BREAK_HELP);
                None
            }
            Expr::Continue(c) => {
                self.error(c, BREAK_HELP);
                None
            }
            Expr::Return(r) if self.closures == 0 => {
                self.error(&*r, RETURN_HELP);
                None
            }
            Expr::Closure(c) => {
                self.check_closure(c);
                self.closures += 1;
                visit_mut::visit_expr_closure_mut(self, c);
                self.closures -= 1;
                None
            }
            Expr::Binary(b) => {
                let t = self.binary(b);
                if t.is_none() {
                    visit_mut::visit_expr_binary_mut(self, b);
                }
                t
            }
            Expr::Field(f) => self.dtype_attr(f),
            Expr::Call(c) => {
                self.visit_expr_mut(&mut c.func);
                for a in c.args.iter_mut() {
                    match a {
                        Expr::Assign(kw) if scope::kwarg(&Expr::Assign(kw.clone())).is_some() => {
                            self.visit_expr_mut(&mut kw.right)
                        }
                        other => self.visit_expr_mut(other),
                    }
                }
                match calls::call(c) {
                    Ok(t) => t,
                    Err(err) => {
                        self.errors.push(err);
                        None
                    }
                }
            }
            Expr::MethodCall(m) => {
                self.visit_expr_mut(&mut m.receiver);
                for a in m.args.iter_mut() {
                    match a {
                        Expr::Assign(kw) if scope::kwarg(&Expr::Assign(kw.clone())).is_some() => {
                            self.visit_expr_mut(&mut kw.right)
                        }
                        other => self.visit_expr_mut(other),
                    }
                }
                match calls::method_call(m) {
                    Ok(t) => t,
                    Err(err) => {
                        self.errors.push(err);
                        None
                    }
                }
            }
            _ => {
                visit_mut::visit_expr_mut(self, e);
                None
            }
        };
        if let Some(t) = new {
            *e = Expr::Verbatim(t);
        }
    }

    fn visit_block_mut(&mut self, b: &mut Block) {
        self.block(b, false);
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}

    fn visit_macro_mut(&mut self, _: &mut syn::Macro) {}
}
