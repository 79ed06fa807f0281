//! Which variables a piece of kernel code assigns that were declared outside it: the values a
//! runtime loop carries or a runtime branch yields.

use syn::visit::{self, Visit};
use syn::{Expr, Ident, Pat};

/// The names bound by a pattern.
pub fn pat_idents(p: &Pat) -> Vec<Ident> {
    struct Names(Vec<Ident>);
    impl<'a> Visit<'a> for Names {
        fn visit_pat_ident(&mut self, p: &'a syn::PatIdent) {
            self.0.push(p.ident.clone());
            visit::visit_pat_ident(self, p);
        }
    }
    let mut n = Names(Vec::new());
    n.visit_pat(p);
    n.0
}

/// A `name = value` argument of a call (Triton's keyword argument).
pub fn kwarg(e: &Expr) -> Option<(&Ident, &Expr)> {
    match e {
        Expr::Assign(a) => match &*a.left {
            Expr::Path(p) if p.qself.is_none() => p.path.get_ident().map(|id| (id, &*a.right)),
            _ => None,
        },
        _ => None,
    }
}

/// The variables an assignment target writes (`x`, `(a, b)`, `x.0`, `xs[i]`).
fn targets(e: &Expr, out: &mut Vec<Ident>) {
    match e {
        Expr::Path(p) if p.qself.is_none() => {
            if let Some(id) = p.path.get_ident() {
                out.push(id.clone());
            }
        }
        Expr::Tuple(t) => t.elems.iter().for_each(|e| targets(e, out)),
        Expr::Paren(p) => targets(&p.expr, out),
        Expr::Field(f) => targets(&f.base, out),
        Expr::Index(i) => targets(&i.expr, out),
        _ => {}
    }
}

/// Finds assignments to names not declared inside the visited code.
pub struct Assigned {
    scopes: Vec<Vec<Ident>>,
    /// The outer variables assigned, in order of their first assignment.
    pub found: Vec<Ident>,
}

impl Assigned {
    /// Starts with `locals` declared (a loop variable, closure parameters).
    pub fn new(locals: Vec<Ident>) -> Assigned {
        Assigned {
            scopes: vec![locals],
            found: Vec::new(),
        }
    }

    fn is_local(&self, id: &Ident) -> bool {
        self.scopes.iter().any(|s| s.contains(id))
    }

    fn assign(&mut self, lhs: &Expr) {
        let mut ids = Vec::new();
        targets(lhs, &mut ids);
        for id in ids {
            if !self.is_local(&id) && !self.found.contains(&id) {
                self.found.push(id);
            }
        }
    }

    fn scoped(&mut self, names: Vec<Ident>, f: impl FnOnce(&mut Self)) {
        self.scopes.push(names);
        f(self);
        self.scopes.pop();
    }

    fn args<'a>(&mut self, args: impl Iterator<Item = &'a Expr>) {
        for a in args {
            match kwarg(a) {
                Some((_, v)) => self.visit_expr(v),
                None => self.visit_expr(a),
            }
        }
    }
}

/// The outer variables that `block` assigns, in order; `locals` are declared inside it.
pub fn assigned_in_block(block: &syn::Block, locals: Vec<Ident>) -> Vec<Ident> {
    let mut a = Assigned::new(locals);
    a.visit_block(block);
    a.found
}

/// The outer variables that `e` assigns, in order.
pub fn assigned_in_expr(e: &Expr, locals: Vec<Ident>) -> Vec<Ident> {
    let mut a = Assigned::new(locals);
    a.visit_expr(e);
    a.found
}

impl<'a> Visit<'a> for Assigned {
    fn visit_block(&mut self, b: &'a syn::Block) {
        self.scoped(Vec::new(), |s| visit::visit_block(s, b));
    }

    fn visit_local(&mut self, l: &'a syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, e)) = &init.diverge {
                self.visit_expr(e);
            }
        }
        let names = pat_idents(&l.pat);
        if let Some(top) = self.scopes.last_mut() {
            top.extend(names);
        }
    }

    fn visit_expr_assign(&mut self, e: &'a syn::ExprAssign) {
        self.assign(&e.left);
        self.visit_expr(&e.right);
    }

    fn visit_expr_binary(&mut self, e: &'a syn::ExprBinary) {
        use syn::BinOp::*;
        let compound = matches!(
            e.op,
            AddAssign(_)
                | SubAssign(_)
                | MulAssign(_)
                | DivAssign(_)
                | RemAssign(_)
                | BitXorAssign(_)
                | BitAndAssign(_)
                | BitOrAssign(_)
                | ShlAssign(_)
                | ShrAssign(_)
        );
        if compound {
            self.assign(&e.left);
            self.visit_expr(&e.right);
        } else {
            visit::visit_expr_binary(self, e);
        }
    }

    fn visit_expr_closure(&mut self, c: &'a syn::ExprClosure) {
        let names = c.inputs.iter().flat_map(pat_idents).collect();
        self.scoped(names, |s| s.visit_expr(&c.body));
    }

    fn visit_expr_for_loop(&mut self, f: &'a syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.scoped(pat_idents(&f.pat), |s| s.visit_block(&f.body));
    }

    fn visit_expr_if(&mut self, e: &'a syn::ExprIf) {
        if let Expr::Let(l) = &*e.cond {
            self.visit_expr(&l.expr);
            self.scoped(pat_idents(&l.pat), |s| s.visit_block(&e.then_branch));
            if let Some((_, el)) = &e.else_branch {
                self.visit_expr(el);
            }
        } else {
            visit::visit_expr_if(self, e);
        }
    }

    fn visit_expr_while(&mut self, e: &'a syn::ExprWhile) {
        if let Expr::Let(l) = &*e.cond {
            self.visit_expr(&l.expr);
            self.scoped(pat_idents(&l.pat), |s| s.visit_block(&e.body));
        } else {
            visit::visit_expr_while(self, e);
        }
    }

    fn visit_arm(&mut self, arm: &'a syn::Arm) {
        self.scoped(pat_idents(&arm.pat), |s| {
            if let Some((_, g)) = &arm.guard {
                s.visit_expr(g);
            }
            s.visit_expr(&arm.body);
        });
    }

    fn visit_expr_call(&mut self, c: &'a syn::ExprCall) {
        self.visit_expr(&c.func);
        self.args(c.args.iter());
    }

    fn visit_expr_method_call(&mut self, c: &'a syn::ExprMethodCall) {
        self.visit_expr(&c.receiver);
        self.args(c.args.iter());
    }

    fn visit_item(&mut self, _: &'a syn::Item) {}
}
