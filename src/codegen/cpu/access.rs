//! Block accesses of the compiled CPU executor as the plan decides them: whole blocks
//! checked once ([`crate::opt::cpu::CpuPlan::whole`]) and loads copied by rows
//! ([`crate::opt::cpu::CpuPlan::rows`]), spelled.
//!
//! How the kernel is compiled can still rule a decision out: pointers cast from integers,
//! outputs every program may share (accessed atomically) and outputs kept in words are
//! read and written element by element, each access checked, whatever the plan says.

use crate::codegen::layout::BlockedLayout;
use crate::codegen::lower::{Lowering, Repr};
use crate::codegen::LayoutChoice;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{OpId, Value};

impl Lowering<'_> {
    /// Whether the plan checks block access `id` through `ptr` once for the whole block
    /// and the pointer is one this compile may access plainly: derived from a parameter
    /// that is neither shared atomically nor updated in place, and held as a block.
    fn whole_block_access(&self, id: OpId, ptr: Value) -> bool {
        self.cpu.as_ref().is_some_and(|c| c.plan.whole(id))
            && self.prov[ptr.index()].is_some()
            && !(self.atomic_outputs && self.is_output_ptr(ptr))
            && self.in_place_param(ptr).is_none()
            && matches!(self.repr(ptr), Repr::Block(_))
    }

    /// Opens the whole-block path of block load `id` into `name` when the plan has one
    /// ([`Self::whole_block_access`]): every element is read (in bounds), masked lanes then
    /// take `other` ([`Self::open_whole`]). Returns whether it opened it.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::codegen) fn open_whole_load(
        &mut self,
        id: OpId,
        name: &str,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        lay: BlockedLayout,
        zero: &str,
    ) -> Result<bool> {
        if !self.whole_block_access(id, ptr) {
            return Ok(false);
        }
        let ct = self.cty(self.ty(ptr).dtype)?;
        let body = match mask {
            Some(m) => {
                let m = self.el(m, "tm_i");
                let o = other.map_or(zero.to_string(), |o| self.el(o, "tm_i"));
                vec![
                    format!("const {ct} tm_x = tm_src[tm_i];"),
                    format!("{name}[tm_i] = {m} ? tm_x : {o};"),
                ]
            }
            None => vec![format!("{name}[tm_i] = tm_src[tm_i];")],
        };
        self.open_whole(ptr, lay, &format!("const {ct}* tm_src"), &body)?;
        Ok(true)
    }

    /// Opens the whole-block path of block store `id` when the plan has one
    /// ([`Self::whole_block_access`]): masked lanes as masked stores
    /// ([`Self::open_whole`]). Returns whether it opened it.
    pub(in crate::codegen) fn open_whole_store(
        &mut self,
        id: OpId,
        ptr: Value,
        value: Value,
        mask: Option<Value>,
        lay: BlockedLayout,
    ) -> Result<bool> {
        if !self.whole_block_access(id, ptr) {
            return Ok(false);
        }
        let ct = self.cty(self.edt(value))?;
        let val = self.el(value, "tm_i");
        let body = match mask {
            Some(m) => format!("if ({}) tm_dst[tm_i] = {val};", self.el(m, "tm_i")),
            None => format!("tm_dst[tm_i] = {val};"),
        };
        self.open_whole(ptr, lay, &format!("{ct}* tm_dst"), &[body])?;
        Ok(true)
    }

    /// One bounds check for the block through `ptr`, then one loop over its elements that
    /// the compiler vectorises (`tm_i`, `body`) through the base pointer declared by `decl`
    /// (`const float* tm_src`), then `} else {` for the checked access the caller prints
    /// and closes.
    fn open_whole(
        &mut self,
        ptr: Value,
        lay: BlockedLayout,
        decl: &str,
        body: &[String],
    ) -> Result<()> {
        let p = self.param_name(ptr)?;
        let off0 = self.el(ptr, "0u");
        self.open(format!("if (tm_in_bounds({p}, {off0}, {}))", lay.n));
        self.line(format!("{decl} = {p}.base + {off0};"));
        self.open(format!("for (uint tm_i = 0; tm_i < {}u; ++tm_i)", lay.n));
        for l in body {
            self.line(l);
        }
        self.close();
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        Ok(())
    }

    /// The row length when the plan copies block load `id` (of `res` through `ptr`) by rows
    /// and the pointer is one this compile reads plainly: derived from a parameter (not
    /// cast from an integer), not read atomically, not updated in place, not packed in
    /// words, held as a block.
    pub(in crate::codegen) fn contiguous_rows(
        &self,
        id: OpId,
        res: Value,
        ptr: Value,
    ) -> Option<usize> {
        let c = *self.ty(res).shape.last()?;
        let p = self.prov[ptr.index()]?;
        let ok = self.cpu.as_ref().is_some_and(|cpu| cpu.plan.rows(id))
            && !self.dynamic[ptr.index()]
            && self.in_words(ptr).is_none()
            && !self.in_place[p]
            && !(self.atomic_outputs && self.k.params[p].stored)
            && matches!(self.repr(ptr), Repr::Block(_));
        ok.then_some(c)
    }

    /// A block load as rows of `c` elements: a row whose mask lanes are all set, whose
    /// offsets run +1 (checked here unless proven) and which lies inside the argument is
    /// one copy; any other row reads element by element, each checked, masked lanes taking
    /// `other`, so a bad access is reported as the element-wise load reports it.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::codegen) fn load_rows(
        &mut self,
        id: OpId,
        name: &str,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        lay: BlockedLayout,
        c: usize,
        zero: &str,
    ) -> Result<()> {
        let p = self.param_name(ptr)?;
        // Per-element conditions of a row's copy (element `tm_i + tm_e`).
        let mut each = Vec::new();
        let mut whole = Vec::new();
        let runs = self.cpu.as_ref().and_then(|s| s.row_runs.get(&id)).cloned();
        if let Some(t) = runs {
            // Checked once before the loop (`open_row_checks`).
            whole.push(format!("{t}[tm_r]"));
        } else if self.axis[ptr.index()].contig < c as u64 {
            let ut = self.cty(if self.off_dtype == DType::I64 {
                DType::U64
            } else {
                DType::U32
            })?;
            each.push(format!(
                "{ut}({}) == {ut}({}) + tm_e",
                self.el(ptr, "tm_i + tm_e"),
                self.el(ptr, "tm_i")
            ));
        }
        if let Some(m) = mask {
            if self.axis[m.index()].cst >= c as u64 || self.is_uniform(m) {
                whole.push(self.el(m, "tm_i"));
            } else {
                each.push(self.el(m, "tm_i + tm_e"));
            }
        }
        self.open(format!(
            "for (uint tm_r = 0; tm_r < {}u; ++tm_r)",
            lay.n / c
        ));
        self.line(format!("const uint tm_i = tm_r * {c}u;"));
        if !each.is_empty() {
            self.line("bool tm_run = true;");
            self.line(format!(
                "for (uint tm_e = 0; tm_e < {c}u; ++tm_e) tm_run &= {};",
                self.all_of(&each)
            ));
            whole.push("tm_run".into());
        }
        let off0 = self.el(ptr, "tm_i");
        whole.push(format!("tm_in_bounds({p}, {off0}, {c})"));
        self.open(format!("if ({})", whole.join(" && ")));
        self.line(format!(
            "__builtin_memcpy(&{name}[tm_i], {p}.base + {off0}, {c}u * sizeof({name}[0]));"
        ));
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        let a = self.access(ptr, &self.el(ptr, "tm_i + tm_e"))?;
        let e = match mask {
            Some(m) => {
                let o = other.map_or(zero.to_string(), |o| self.el(o, "tm_i + tm_e"));
                format!("{} ? {a} : {o}", self.el(m, "tm_i + tm_e"))
            }
            None => a,
        };
        self.line(format!(
            "for (uint tm_e = 0; tm_e < {c}u; ++tm_e) {name}[tm_i + tm_e] = {e};"
        ));
        self.close();
        self.close();
        self.layouts.push(LayoutChoice {
            op: format!("load {name}"),
            layout: format!("rows of {c}: one bounds check and one copy per row"),
        });
        Ok(())
    }
}
