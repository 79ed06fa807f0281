//! Build state: the kernel being recorded, held in a thread-local stack only while a kernel
//! closure runs (like Triton's implicit builder, without global state outside a build).
//!
//! Every DSL call goes through [`op`] (or [`with`]): it finds the current builder, runs one
//! semantics function, and records the first error (with the caller's source location)
//! instead of panicking. After an error every further DSL call is a no-op returning a
//! poisoned [`Tensor`].

use std::cell::RefCell;
use std::collections::BTreeMap;

use super::jit::{ArgType, ConstexprValue};
use super::tensor::Tensor;
use crate::error::{Error, SourceLoc};
use crate::ir::{
    Kernel, Op, OpData, OpId, RegionData, RegionId, Type, Value, ValueData, ValueDef, ValueRange,
};

/// Result of a semantics function: a message, completed into an [`Error::Build`] by [`op`].
pub(crate) type Res<T> = std::result::Result<T, String>;

/// The kernel under construction.
pub(crate) struct Builder {
    pub(crate) k: Kernel,
    /// Distinguishes handles of this build from those of other builds.
    pub(crate) id: u32,
    /// Insertion stack: ops go to the last region.
    pub(crate) insert: Vec<RegionId>,
    /// First error.
    pub(crate) error: Option<Error>,
    /// Location and name of the DSL call being executed.
    pub(crate) loc: SourceLoc,
    pub(crate) op_name: &'static str,
    /// Uses of each value (so `load(..).mask(..)` can still rewrite an unused load).
    pub(crate) uses: Vec<u32>,
    /// The requested specialisation: constexprs by name.
    pub(crate) given: BTreeMap<String, ConstexprValue>,
    /// The kind and dtype of each launch argument, by position; `None` when the build has
    /// no arguments (generic parameters cannot be built then).
    pub(crate) arg_types: Option<Vec<ArgType>>,
    /// True while a trial build (no constexprs given) asked for a constexpr.
    pub(crate) wants_constexpr: bool,
    /// True while a build without arguments declared a generic parameter.
    pub(crate) wants_dtypes: bool,
    /// Constexprs the body read, with the value it got (given or default).
    pub(crate) read: Vec<(String, ConstexprValue)>,
    /// Indices of the parameters declared generic (their dtype came from the arguments).
    pub(crate) generic: Vec<usize>,
    /// True once values are no longer numbered in program order (an op was moved, or a
    /// parameter was declared after ops); the build then renumbers.
    pub(crate) reordered: bool,
    /// Declared parameter and constexpr names (duplicates are errors).
    pub(crate) declared: Vec<String>,
    /// Loads and stores through block pointers and tensor descriptors (`.mask()` refuses them).
    pub(crate) block_ops: Vec<OpId>,
    /// Parameters declared `tl.const` ([`crate::tl::KernelBuilder::const_ptr`]).
    pub(crate) const_params: Vec<usize>,
}

thread_local! {
    static STACK: RefCell<Vec<Builder>> = const { RefCell::new(Vec::new()) };
    static NEXT_ID: std::cell::Cell<u32> = const { std::cell::Cell::new(1) };
}

impl Builder {
    fn new(name: &str, spec: &BuildSpec) -> Builder {
        let id = NEXT_ID.with(|n| {
            let id = n.get();
            // Wrapping skips 0, the poison id.
            n.set(id.checked_add(1).unwrap_or(1));
            id
        });
        Builder {
            k: Kernel::new(name),
            id,
            insert: vec![RegionId(0)],
            error: None,
            loc: SourceLoc {
                file: "<kernel>",
                line: 0,
                column: 0,
            },
            op_name: "jit",
            uses: Vec::new(),
            given: spec.constexprs.clone(),
            arg_types: spec.args.clone(),
            wants_constexpr: false,
            wants_dtypes: false,
            read: Vec::new(),
            generic: Vec::new(),
            reordered: false,
            declared: Vec::new(),
            block_ops: Vec::new(),
            const_params: Vec::new(),
        }
    }

    /// Records an error (the first one wins).
    pub(crate) fn fail(&mut self, msg: String) {
        if self.error.is_none() {
            self.error = Some(Error::Build {
                kernel: self.k.name.clone(),
                op: self.op_name.to_string(),
                loc: self.loc,
                msg,
            });
        }
    }

    /// A handle for `v`.
    pub(crate) fn handle(&self, v: Value) -> Tensor {
        Tensor::new(v, self.id)
    }

    /// Checks a handle belongs to this build.
    pub(crate) fn value(&self, t: Tensor) -> Res<Value> {
        if t.build_id() == self.id && t.value().index() < self.k.values.len() {
            Ok(t.value())
        } else if t.build_id() == 0 {
            Err("use of a tensor from a failed operation".into())
        } else {
            Err("this tensor belongs to another kernel build (tensors cannot outlive the jit closure)".into())
        }
    }

    pub(crate) fn ty(&self, v: Value) -> &Type {
        &self.k.values[v.index()].ty
    }

    pub(crate) fn new_value(&mut self, ty: Type, def: ValueDef) -> Value {
        let v = Value(self.k.values.len() as u32);
        self.k.values.push(ValueData { ty, def });
        self.uses.push(0);
        v
    }

    pub(crate) fn current_region(&self) -> RegionId {
        *self.insert.last().unwrap_or(&RegionId(0))
    }

    /// Appends an op with results of `tys` to the current region. Only `semantics.rs` calls
    /// this (STYLE rule 4).
    pub(crate) fn emit(&mut self, op: Op, tys: Vec<Type>) -> ValueRange {
        let id = OpId(self.k.ops.len() as u32);
        op.for_each_operand(|v| {
            if let Some(u) = self.uses.get_mut(v.index()) {
                *u += 1;
            }
        });
        let start = self.k.values.len() as u32;
        let len = tys.len() as u32;
        for (i, ty) in tys.into_iter().enumerate() {
            self.new_value(ty, ValueDef::OpResult(id, i as u32));
        }
        let parent = self.current_region();
        for r in op.regions() {
            if let Some(reg) = self.k.regions.get_mut(r.index()) {
                reg.parent = Some(id);
            }
        }
        self.k.ops.push(OpData {
            op,
            results: ValueRange { start, len },
            loc: self.loc,
            parent,
        });
        self.k.regions[parent.index()].ops.push(id);
        ValueRange { start, len }
    }

    /// Creates a region with block arguments of `tys` and makes it current; an error beyond
    /// [`crate::ir::MAX_NESTING`] levels of regions.
    pub(crate) fn push_region(&mut self, tys: &[Type]) -> Res<(RegionId, Vec<Value>)> {
        // `insert` holds the kernel body and every open region.
        if self.insert.len() > crate::ir::MAX_NESTING {
            return Err(format!(
                "control flow nested more than {} levels deep (loops, branches and \
                 reduce/scan combine functions count; see tl::MAX_NESTING)",
                crate::ir::MAX_NESTING
            ));
        }
        let r = RegionId(self.k.regions.len() as u32);
        self.k.regions.push(RegionData::default());
        let args: Vec<Value> = tys
            .iter()
            .enumerate()
            .map(|(i, t)| self.new_value(t.clone(), ValueDef::RegionArg(r, i as u32)))
            .collect();
        self.k.regions[r.index()].args = args.clone();
        self.insert.push(r);
        Ok((r, args))
    }

    /// Leaves region `r` (which must be current).
    pub(crate) fn pop_region(&mut self, r: RegionId) -> Res<()> {
        if self.insert.last() == Some(&r) && self.insert.len() > 1 {
            self.insert.pop();
            Ok(())
        } else {
            Err("control-flow regions were closed out of order".into())
        }
    }
}

/// Runs `f` on the current builder (None outside a kernel closure).
pub(crate) fn with<R>(f: impl FnOnce(Option<&mut Builder>) -> R) -> R {
    STACK.with(|s| match s.try_borrow_mut() {
        Ok(mut stack) => f(stack.last_mut()),
        Err(_) => f(None),
    })
}

/// Runs one DSL operation named `name` at `loc`: `f` gets the builder and returns the result
/// value; errors are recorded and give a poisoned tensor.
pub(crate) fn op(
    name: &'static str,
    loc: SourceLoc,
    f: impl FnOnce(&mut Builder) -> Res<Value>,
) -> Tensor {
    with(|b| match b {
        Some(b) if b.error.is_none() => {
            b.loc = loc;
            b.op_name = name;
            match f(b) {
                Ok(v) => b.handle(v),
                Err(msg) => {
                    b.fail(msg);
                    Tensor::poison()
                }
            }
        }
        _ => Tensor::poison(),
    })
}

/// Like [`op`] for operations with any result (or none): `None` after an error or outside a
/// kernel closure.
pub(crate) fn op_any<R>(
    name: &'static str,
    loc: SourceLoc,
    f: impl FnOnce(&mut Builder) -> Res<R>,
) -> Option<R> {
    with(|b| match b {
        Some(b) if b.error.is_none() => {
            b.loc = loc;
            b.op_name = name;
            match f(b) {
                Ok(r) => Some(r),
                Err(msg) => {
                    b.fail(msg);
                    None
                }
            }
        }
        _ => None,
    })
}

/// What one build is for: constexprs, and the arguments' dtypes when known.
#[derive(Clone, Debug, Default)]
pub(crate) struct BuildSpec {
    pub(crate) constexprs: BTreeMap<String, ConstexprValue>,
    pub(crate) args: Option<Vec<ArgType>>,
}

/// Runs a whole build: pushes a fresh builder, runs `body`, pops it and returns it.
pub(crate) fn run_build(name: &str, spec: &BuildSpec, body: impl FnOnce()) -> Builder {
    STACK.with(|s| s.borrow_mut().push(Builder::new(name, spec)));
    // Pop even if the user's closure panics, so this thread's stack stays consistent.
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            if std::thread::panicking() {
                STACK.with(|s| {
                    if let Ok(mut st) = s.try_borrow_mut() {
                        st.pop();
                    }
                });
            }
        }
    }
    let guard = Guard;
    body();
    drop(guard);
    STACK.with(|s| s.borrow_mut().pop()).unwrap_or_else(|| {
        let mut b = Builder::new(name, spec);
        b.fail("internal error: builder stack underflow".into());
        b
    })
}
