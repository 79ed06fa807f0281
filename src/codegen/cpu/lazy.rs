//! Lazy blocks for the compiled CPU executor: blocks computed element by element where
//! they are read (`tm_lazy`), as the plan decides ([`crate::opt::cpu::CpuPlan::recipes`]
//! for index arithmetic, [`crate::opt::cpu::CpuPlan::lazy`] for values computed in their
//! readers' loops), spelled.

use std::collections::BTreeSet;

use crate::codegen::layout::BlockedLayout;
use crate::codegen::lower::{Lowering, Repr, FLAT};
use crate::codegen::LayoutChoice;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::Value;

impl Lowering<'_> {
    /// Whether blocks that are pure functions of their element index are computed where
    /// they are read.
    pub(in crate::codegen) fn lazy_recipes(&self) -> bool {
        self.cpu.as_ref().is_some_and(|c| c.plan.recipes)
    }

    /// The compile-time flag `v`'s reads go through while a split of mask `v` is open.
    pub(in crate::codegen) fn flag(&self, v: Value) -> Option<&String> {
        self.cpu.as_ref()?.flags.get(&v)
    }

    /// Every variable lazy block `name` reads, when it is one.
    pub(in crate::codegen) fn lazy_reads_of(&self, name: &str) -> Option<&BTreeSet<String>> {
        self.cpu.as_ref()?.lazy_reads.get(name)
    }

    /// A block computed element by element where it is read (`name[i]` evaluates `recipe`
    /// at flat index `i`): index arithmetic and masks then cost nothing until they are used,
    /// and fold into their uses. Only where the flat index is the register index (one
    /// thread per program).
    pub(in crate::codegen) fn lazy_block(
        &mut self,
        base: &str,
        dt: DType,
        recipe: &str,
    ) -> Result<String> {
        debug_assert_eq!(
            self.threads, 1,
            "lazy blocks need flat index == register index"
        );
        let name = self.fresh(base);
        let ct = self.cty(dt)?;
        // Recipes read uniform scalars only, so capturing by value snapshots them.
        self.line(format!(
            "const auto {name} = tm_lazy<{ct}>([=](uint tm_k) {{ return {ct}({}); }});",
            recipe.replace(FLAT, "tm_k")
        ));
        Ok(name)
    }

    /// Prints index block `res` (element `i` is `recipe` at `i`) as a lazy block or, where
    /// the plan tables it ([`crate::opt::cpu::CpuPlan::tabled`]), fills it into an array
    /// once; records its representation and the recipe its readers inline, which reads the
    /// table when there is one.
    pub(in crate::codegen) fn recipe_block(
        &mut self,
        res: Value,
        base: &str,
        dt: DType,
        recipe: String,
    ) -> Result<()> {
        if !self.cpu.as_ref().is_some_and(|c| c.plan.tabled(res)) {
            let name = self.lazy_block(base, dt, &recipe)?;
            self.set(res, Repr::Block(name));
            self.recipes[res.index()] = Some(recipe);
            return Ok(());
        }
        let lay = self.layout(res);
        let name = self.declare_block(base, dt, lay.n)?;
        self.open_regs(lay, true);
        self.line(format!("{name}[tm_i] = {};", recipe.replace(FLAT, "tm_l")));
        self.close();
        // Recipes capture by value: they read the table through a pointer (nothing writes
        // the table after this).
        let at = self.fresh(&format!("{base}_at"));
        let ct = self.cty(dt)?;
        self.line(format!("const {ct}* const {at} = {name};"));
        self.layouts.push(LayoutChoice {
            op: format!("{base} {name}: {}", self.ty(res)),
            layout: "filled once; recipes reading it index the array".into(),
        });
        self.set(res, Repr::Block(name));
        self.recipes[res.index()] = Some(format!("{at}[{FLAT}]"));
        Ok(())
    }

    /// Prints elementwise `res = f(args)` as a lazy block computed inside its reader's
    /// loop when the plan says so and the chain of lazy blocks it reads stays within the
    /// plan's depth; returns whether it did.
    pub(in crate::codegen) fn lazy_elementwise(
        &mut self,
        res: Value,
        args: &[Value],
        base: &str,
        ct: &str,
        f: &dyn Fn(&[String]) -> String,
    ) -> bool {
        let Some(cap) = self
            .cpu
            .as_ref()
            .filter(|c| c.plan.lazy(res))
            .map(|c| c.plan.lazy_depth)
        else {
            return false;
        };
        let depth = self.lazy_depth_of(args);
        if depth > cap {
            return false;
        }
        // Computed inside its one consumer's loop: no array, no extra pass over the
        // block. The consumer comes later in this region and nothing is assigned in
        // between (variables change only in `assign_carried`, which sees what each lazy
        // value reads), so capturing the operands by reference reads their values now.
        let name = self.fresh(base);
        let xs: Vec<String> = args.iter().map(|a| self.el(*a, "tm_k")).collect();
        let reads = self.reads_of(args);
        self.line(format!(
            "const auto {name} = tm_lazy<{ct}>([&](uint tm_k) {{ return {ct}({}); }});",
            f(&xs)
        ));
        self.record_lazy(&name, reads, depth);
        self.set(res, Repr::Block(name));
        true
    }

    /// Whether a block load may be read where it is used ([`Self::lazy_load`]): the plan
    /// computes it where it is read, its argument is read-only (nothing can change it in
    /// between) and its offsets are consecutive over the whole block.
    pub(in crate::codegen) fn lazy_load_ok(
        &self,
        res: Value,
        ptr: Value,
        lay: BlockedLayout,
    ) -> bool {
        self.cpu.as_ref().is_some_and(|c| c.plan.lazy(res))
            && self.prov[ptr.index()].is_some_and(|p| !self.k.params[p].stored)
            && self.axis[ptr.index()].contig >= lay.n as u64
            && matches!(self.repr(ptr), Repr::Block(_))
    }

    /// The block of an in-bounds load read straight from the argument where its consumer
    /// reads it (masked lanes still give `other`, as branch-free selects); `eager` holds the
    /// checked load's result when the block was not all in bounds (its masked lanes already
    /// hold `other`, so selecting again changes nothing).
    #[allow(clippy::too_many_arguments)]
    pub(in crate::codegen) fn lazy_load(
        &mut self,
        res: Value,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        eager: &str,
        fast: &str,
        zero: &str,
    ) -> Result<()> {
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let p = self.param_name(ptr)?;
        let src = self.fresh(&format!("{eager}_src"));
        self.line(format!(
            "const {ct}* {src} = {fast} ? {p}.base + {} : {eager};",
            self.el(ptr, "0u")
        ));
        // Every element of `src` may be read (in bounds, or the eager copy), so the read
        // comes first and unconditionally: a select, not a branch around a load.
        let e = match mask {
            Some(m) => {
                let m = self.el(m, "tm_k");
                let o = other.map_or(zero.to_string(), |o| self.el(o, "tm_k"));
                format!("const {ct} tm_x = {src}[tm_k]; return {ct}({m} ? tm_x : {o});")
            }
            None => format!("return {ct}({src}[tm_k]);"),
        };
        let mut args = vec![ptr];
        args.extend(mask);
        args.extend(other);
        let reads = self.reads_of(&args);
        let depth = self.lazy_depth_of(&args);
        let name = self.fresh(eager);
        self.line(format!(
            "const auto {name} = tm_lazy<{ct}>([&](uint tm_k) {{ {e} }});"
        ));
        self.record_lazy(&name, reads, depth);
        self.layouts.push(LayoutChoice {
            op: format!("load {name}: {}", self.ty(res)),
            layout: "read where it is used when the whole block is in bounds".into(),
        });
        self.set(res, Repr::Block(name));
        Ok(())
    }

    /// Remembers what lazy block `name` reads and how deep its chain goes.
    pub(in crate::codegen) fn record_lazy(
        &mut self,
        name: &str,
        reads: BTreeSet<String>,
        depth: usize,
    ) {
        if let Some(c) = self.cpu.as_mut() {
            c.lazy_reads.insert(name.to_string(), reads);
            c.lazy_depth.insert(name.to_string(), depth);
        }
    }

    /// The depth of a lazy block reading `args` (see [`super::CpuStage::lazy_depth`]).
    fn lazy_depth_of(&self, args: &[Value]) -> usize {
        let Some(c) = self.cpu.as_ref() else {
            return 1;
        };
        1 + args
            .iter()
            .filter_map(|a| match self.reprs.get(a.index()) {
                Some(Some(Repr::Block(n))) => c.lazy_depth.get(n).copied(),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Every variable that lazy blocks built from `args` read, directly or through other
    /// lazy blocks.
    fn reads_of(&self, args: &[Value]) -> BTreeSet<String> {
        let mut reads = BTreeSet::new();
        for a in args {
            let (Repr::Block(n) | Repr::Scalar(n) | Repr::Splat(n)) = self.repr(*a);
            reads.insert(n.clone());
            if let Some(r) = self.lazy_reads_of(n) {
                reads.extend(r.iter().cloned());
            }
        }
        reads
    }
}
