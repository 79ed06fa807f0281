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

    /// The row length when the plan moves block load or store `id` (of `res` through
    /// `ptr`) by rows and the pointer is one this compile accesses by rows: derived from a
    /// parameter (not cast from an integer), not updated in place, not packed in words,
    /// held as a block, and for a load not read atomically (a store to an output that
    /// programs may share stays atomic element by element, after its row's checks).
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
            && !(self.atomic_outputs
                && self.k.params[p].stored
                && matches!(self.k.op(id).op, crate::ir::Op::Load { .. }))
            && matches!(self.repr(ptr), Repr::Block(_));
        ok.then_some(c)
    }

    /// A block load as rows of `c` elements: a row whose mask lanes are all set, whose
    /// offsets run +1 (checked here unless proven) and which lies inside the argument is
    /// one copy; any other row reads element by element, each checked, masked lanes taking
    /// `other`, so a bad access is reported as the element-wise load reports it. Where the
    /// plan reads the rows in place ([`crate::opt::cpu::CpuPlan::rows_in_place`]), a row that
    /// passes is not copied: a table of row pointers (`<name>_rows`, in
    /// [`super::CpuStage::row_ptrs`]) points at it in the argument, or at the copy of a row
    /// that did not pass.
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
        let conds = self.row_conds(id, ptr, mask, c)?;
        let res = self.k.op(id).result();
        let in_place = match res {
            Some(r) if self.cpu.as_ref().is_some_and(|s| s.plan.rows_in_place(id)) => {
                let table = format!("{name}_rows");
                let ct = self.cty(self.edt(r))?;
                self.line(format!("const {ct}* {table}[{}];", lay.n / c));
                Some((r, table))
            }
            _ => None,
        };
        self.open(format!(
            "for (uint tm_r = 0; tm_r < {}u; ++tm_r)",
            lay.n / c
        ));
        self.line(format!("const uint tm_i = tm_r * {c}u;"));
        let table = in_place.as_ref().map(|(_, t)| t.as_str());
        self.row_copy(name, ptr, (mask, other, zero), c, &conds, (None, table))?;
        self.close();
        let how = if in_place.is_some() {
            "read in place by the dot where it passes, else copied"
        } else {
            "one copy per row"
        };
        if let (Some((r, table)), Some(cpu)) = (in_place, self.cpu.as_mut()) {
            cpu.row_ptrs.insert(r, table);
        }
        self.layouts.push(LayoutChoice {
            op: format!("load {name}"),
            layout: format!("rows of {c}: one bounds check per row, {how}"),
        });
        Ok(())
    }

    /// A block store as rows of `c` elements: a row whose mask lanes are all set, whose
    /// offsets run +1 (checked here unless proven) and which lies inside the argument stores
    /// its elements through the row's base pointer without checking each (plainly, or as
    /// relaxed atomics where programs may share the output); any other row stores element
    /// by element, each checked, masked lanes skipped, so a bad access is reported as the
    /// element-wise store reports it.
    pub(in crate::codegen) fn store_rows(
        &mut self,
        id: OpId,
        ptr: Value,
        value: Value,
        mask: Option<Value>,
        lay: BlockedLayout,
        c: usize,
    ) -> Result<()> {
        let p = self.param_name(ptr)?;
        let ct = self.cty(self.edt(value))?;
        let conds = self.row_conds(id, ptr, mask, c)?;
        self.open(format!(
            "for (uint tm_r = 0; tm_r < {}u; ++tm_r)",
            lay.n / c
        ));
        self.line(format!("const uint tm_i = tm_r * {c}u;"));
        self.row_run(&conds, c);
        self.open(format!("if ({})", conds.whole.join(" && ")));
        self.line(format!("{ct}* const tm_dst = {p}.base + {};", conds.off0));
        let val = self.el(value, "tm_i + tm_e");
        let each = if self.atomic_outputs {
            self.d
                .atomic_store
                .replace("{addr}", "&tm_dst[tm_e]")
                .replace("{val}", &val)
        } else {
            format!("tm_dst[tm_e] = {val};")
        };
        self.line(format!("for (uint tm_e = 0; tm_e < {c}u; ++tm_e) {each}"));
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        let s = self.store_stmt(ptr, &self.el(ptr, "tm_i + tm_e"), &val)?;
        let s = match mask {
            Some(m) => format!("if ({}) {s}", self.el(m, "tm_i + tm_e")),
            None => s,
        };
        self.line(format!("for (uint tm_e = 0; tm_e < {c}u; ++tm_e) {s}"));
        self.close();
        self.close();
        self.layouts.push(LayoutChoice {
            op: format!("store {p}"),
            layout: format!("rows of {c}: one bounds check per row"),
        });
        Ok(())
    }

    /// The conditions of copying row `tm_r` (first element `tm_i`) of a load of rows of
    /// `c` at once: per element (`tm_e`; combined into `tm_run` by [`Self::row_run`]) and
    /// for the whole row, the bounds check last.
    fn row_conds(&self, id: OpId, ptr: Value, mask: Option<Value>, c: usize) -> Result<RowConds> {
        let p = self.param_name(ptr)?;
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
        if !each.is_empty() {
            whole.push("tm_run".into());
        }
        let off0 = self.el(ptr, "tm_i");
        whole.push(format!("tm_in_bounds({p}, {off0}, {c})"));
        Ok(RowConds { each, whole, off0 })
    }

    /// Declares `tm_run`, whether every per-element condition of the row holds.
    fn row_run(&mut self, conds: &RowConds, c: usize) {
        if !conds.each.is_empty() {
            self.line("bool tm_run = true;");
            self.line(format!(
                "for (uint tm_e = 0; tm_e < {c}u; ++tm_e) tm_run &= {};",
                self.all_of(&conds.each)
            ));
        }
    }

    /// Copies row `tm_r` (first element `tm_i`) into `name`: at once where `conds` hold,
    /// else element by element, checked, masked lanes taking `other` (`slow`, a statement
    /// run first on that path). With a table of row pointers (`rows`), a row where `conds`
    /// hold is not copied: its entry points at it in the argument; other rows' entries point
    /// at their copies.
    fn row_copy(
        &mut self,
        name: &str,
        ptr: Value,
        (mask, other, zero): (Option<Value>, Option<Value>, &str),
        c: usize,
        conds: &RowConds,
        (slow, rows): (Option<&str>, Option<&str>),
    ) -> Result<()> {
        let p = self.param_name(ptr)?;
        self.row_run(conds, c);
        self.open(format!("if ({})", conds.whole.join(" && ")));
        match rows {
            Some(t) => self.line(format!("{t}[tm_r] = {p}.base + {};", conds.off0)),
            None => self.line(format!(
                "__builtin_memcpy(&{name}[tm_i], {p}.base + {}, {c}u * sizeof({name}[0]));",
                conds.off0
            )),
        }
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        if let Some(s) = slow {
            self.line(s);
        }
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
        if let Some(t) = rows {
            self.line(format!("{t}[tm_r] = &{name}[tm_i];"));
        }
        self.close();
        Ok(())
    }

    /// Block load `id` of `res` through `ptr` into a slot of a per-thread cache of tiles,
    /// when the plan packs it ([`crate::opt::cpu::CpuPlan::packed`]) and the load copies
    /// rows ([`Self::contiguous_rows`]): the slot of the loop's trip counter (modulo the
    /// slots) is used as it is when it holds a tile copied whole from the same row offsets
    /// and this load would copy every row whole too (the argument is read-only, so the
    /// copy still equals memory); otherwise the tile is loaded into the slot by rows, and
    /// the slot kept only if every row was copied whole. The tile's flag of being found
    /// ([`super::CpuStage::packed_hits`]) tells the dot not to prefetch the rows the next
    /// iteration loads. Returns whether it printed the load.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::codegen) fn load_packed(
        &mut self,
        id: OpId,
        res: Value,
        ptr: Value,
        mask: Option<Value>,
        other: Option<Value>,
        lay: BlockedLayout,
        zero: &str,
    ) -> Result<bool> {
        let slots = self.cpu.as_ref().map_or(0, |c| c.plan.packed(id));
        let t = self.cpu.as_ref().and_then(|c| c.loops.last().cloned());
        let (Some(c), Some(t)) = (self.contiguous_rows(id, res, ptr), t) else {
            return Ok(false);
        };
        if slots == 0 {
            return Ok(false);
        }
        let dt = self.edt(res);
        let ct = self.cty(dt)?;
        let ot = self.cty(self.off_dtype)?;
        let rows = lay.n / c;
        let cache = self.fresh(&format!("{}_pack", self.stem(ptr)));
        let (key, ok) = (format!("{cache}_key"), format!("{cache}_ok"));
        self.local_bytes +=
            slots * (lay.n * dt.size_bytes() + rows * self.off_dtype.size_bytes() + 1);
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.preamble.extend([
                format!("alignas(64) {ct} {cache}[{slots}][{}];", lay.n),
                format!("{ot} {key}[{slots}][{rows}];"),
                format!("bool {ok}[{slots}] = {{}};"),
            ]);
        }
        let conds = self.row_conds(id, ptr, mask, c)?;
        let name = self.fresh(&self.stem(ptr));
        let (slot, hit, all) = (
            self.fresh("pk_slot"),
            self.fresh("pk_hit"),
            self.fresh("pk_all"),
        );
        self.line(format!("const uint {slot} = uint({t} % {slots}u);"));
        self.line(format!("{ct}* const {name} = {cache}[{slot}];"));
        self.line(format!("bool {hit} = {ok}[{slot}];"));
        let row_loop = format!("for (uint tm_r = 0; tm_r < {rows}u; ++tm_r)");
        self.open(&row_loop);
        self.line(format!("const uint tm_i = tm_r * {c}u;"));
        self.row_run(&conds, c);
        let mut all_of = conds.whole.clone();
        all_of.push(format!("{key}[{slot}][tm_r] == {}", conds.off0));
        let all_of: Vec<String> = all_of.iter().map(|x| format!("bool({x})")).collect();
        self.line(format!("{hit} &= {};", all_of.join(" & ")));
        self.close();
        self.open(format!("if (!{hit})"));
        self.line(format!("bool {all} = true;"));
        self.open(&row_loop);
        self.line(format!("const uint tm_i = tm_r * {c}u;"));
        self.line(format!("{key}[{slot}][tm_r] = {};", conds.off0));
        let slow = format!("{all} = false;");
        self.row_copy(
            &name,
            ptr,
            (mask, other, zero),
            c,
            &conds,
            (Some(&slow), None),
        )?;
        self.close();
        self.line(format!("{ok}[{slot}] = {all};"));
        self.close();
        self.layouts.push(LayoutChoice {
            op: format!("load {name}: {}", self.ty(res)),
            layout: format!(
                "packed: rows of {c} into slot {t} % {slots} of a per-thread cache, unless it \
                 holds them"
            ),
        });
        if let Some(cpu) = self.cpu.as_mut() {
            cpu.packed_hits.insert(res, hit);
        }
        self.set(res, Repr::Block(name));
        Ok(true)
    }
}

/// The conditions of a row copy ([`Lowering::row_conds`]).
struct RowConds {
    /// Per element `tm_e` of the row.
    each: Vec<String>,
    /// For the whole row (`tm_run` for the per-element ones), the bounds check last.
    whole: Vec<String>,
    /// The row's first offset.
    off0: String,
}
