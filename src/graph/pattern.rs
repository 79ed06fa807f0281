//! A small tree-pattern matcher over op graphs: patterns are data ([`P`]), one driver
//! ([`Matcher::matches`]) walks producers backwards from an anchor value, binds names to
//! value ids and records which nodes the match covers.

use std::collections::{BTreeSet, HashMap};

use super::fusion::{Node, Pattern};
use super::ops::OpKind;

/// A pattern over the value that some node produces.
#[derive(Clone, Debug)]
pub enum P {
    /// Any value; binds `name` on first use and must equal the bound value afterwards.
    V(&'static str),
    /// An op of this kind (no scalar operand) whose operands match, in either order for
    /// commutative ops.
    Op(OpKind, Vec<P>),
    /// An op of this kind with `args.scalar` within 1e-4 (relative) of the constant, the
    /// scalar on the right.
    Scalar(OpKind, Box<P>, f64),
    /// An op of this kind with any right-hand scalar, bound to `name` (read with
    /// [`Bindings::scalar`]).
    AnyScalar(OpKind, Box<P>, &'static str),
    /// A fused group of this pattern; its primary input (`FusedGroup::primary_input`)
    /// matches the inner pattern.
    Group(Pattern, Box<P>),
    /// The first alternative that matches.
    OneOf(Vec<P>),
    /// Binds the id of the value matched here to `name`, then matches the inner pattern
    /// (so checks on a node's arguments can find it afterwards).
    At(&'static str, Box<P>),
}

/// Shorthands so pattern tables read like the formulas they match.
pub mod dsl {
    use super::P;
    use crate::graph::ops::OpKind;

    /// A named value.
    pub fn v(name: &'static str) -> P {
        P::V(name)
    }
    /// Unary op.
    pub fn un(k: OpKind, a: P) -> P {
        P::Op(k, vec![a])
    }
    /// Binary op.
    pub fn bin(k: OpKind, a: P, b: P) -> P {
        P::Op(k, vec![a, b])
    }
    /// Binary op with a constant right operand.
    pub fn sc(k: OpKind, a: P, c: f64) -> P {
        P::Scalar(k, Box::new(a), c)
    }
    /// Alternatives.
    pub fn one_of(ps: Vec<P>) -> P {
        P::OneOf(ps)
    }
    /// Names the value matched by `p`.
    pub fn at(name: &'static str, p: P) -> P {
        P::At(name, Box::new(p))
    }
}

/// What a successful match bound.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    values: HashMap<&'static str, String>,
    scalars: HashMap<&'static str, f64>,
    /// Indices of the nodes the match covers.
    pub members: BTreeSet<usize>,
}

impl Bindings {
    /// The value id bound to `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The scalar bound to `name`.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.scalars.get(name).copied()
    }
}

/// Matches patterns against a node list.
pub struct Matcher<'a> {
    nodes: &'a [Node],
    index: HashMap<&'a str, usize>,
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-4 * b.abs().max(1e-12)
}

impl<'a> Matcher<'a> {
    /// A matcher over `nodes`.
    pub fn new(nodes: &'a [Node]) -> Matcher<'a> {
        let index = nodes.iter().enumerate().map(|(i, n)| (n.id(), i)).collect();
        Matcher { nodes, index }
    }

    /// The node producing `id`.
    pub fn producer(&self, id: &str) -> Option<(usize, &'a Node)> {
        let i = *self.index.get(id)?;
        Some((i, &self.nodes[i]))
    }

    /// Matches `p` against the value `id`.
    pub fn matches(&self, p: &P, id: &str) -> Option<Bindings> {
        self.go(p, id, Bindings::default())
    }

    fn go(&self, p: &P, id: &str, mut b: Bindings) -> Option<Bindings> {
        match p {
            P::V(name) => match b.values.get(name) {
                Some(bound) if bound != id => None,
                Some(_) => Some(b),
                None => {
                    b.values.insert(name, id.to_string());
                    Some(b)
                }
            },
            P::OneOf(alts) => alts.iter().find_map(|a| self.go(a, id, b.clone())),
            P::At(name, inner) => {
                match b.values.get(name) {
                    Some(bound) if bound != id => return None,
                    _ => {}
                }
                b.values.insert(name, id.to_string());
                self.go(inner, id, b)
            }
            P::Op(kind, operands) => {
                let (i, node) = self.producer(id)?;
                let op = node.as_op()?;
                if op.kind != *kind || op.args.scalar.is_some() || op.inputs.len() != operands.len()
                {
                    return None;
                }
                b.members.insert(i);
                let ids = &op.inputs;
                let straight = self.all(operands, ids.iter().map(String::as_str), b.clone());
                if straight.is_some() || !kind.is_commutative() || ids.len() != 2 {
                    return straight;
                }
                self.all(operands, ids.iter().rev().map(String::as_str), b)
            }
            P::Scalar(kind, inner, c) => {
                let (i, node) = self.producer(id)?;
                let op = node.as_op()?;
                match op.args.scalar {
                    Some(s) if op.kind == *kind && !op.args.reverse && close(s, *c) => {
                        b.members.insert(i);
                        self.go(inner, &op.inputs[0], b)
                    }
                    _ => None,
                }
            }
            P::AnyScalar(kind, inner, name) => {
                let (i, node) = self.producer(id)?;
                let op = node.as_op()?;
                match op.args.scalar {
                    Some(s) if op.kind == *kind && !op.args.reverse => {
                        b.members.insert(i);
                        b.scalars.insert(name, s);
                        self.go(inner, &op.inputs[0], b)
                    }
                    _ => None,
                }
            }
            P::Group(pattern, inner) => {
                let (i, node) = self.producer(id)?;
                let g = node.as_group()?;
                if g.pattern != *pattern {
                    return None;
                }
                b.members.insert(i);
                self.go(inner, g.primary_input(), b)
            }
        }
    }

    fn all<'s>(
        &self,
        ps: &[P],
        ids: impl Iterator<Item = &'s str>,
        mut b: Bindings,
    ) -> Option<Bindings> {
        for (p, id) in ps.iter().zip(ids) {
            b = self.go(p, id, b)?;
        }
        Some(b)
    }
}
