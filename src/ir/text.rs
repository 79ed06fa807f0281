//! The text form of a kernel (`Kernel::ir`): readable, deterministic, snapshot-testable.
//!
//! ```text
//! kernel add(%0: ptr<f32> x_ptr, %1: i32 n) [BLOCK=4] {
//!   %2 = program_id 0 : i32
//!   %3 = constant 4 : i32
//!   %4 = mul %2, %3 : i32
//!   %5 = for %lo, %hi, %step iter(%4) : i32 body {
//!   ^r1(%6: i32, %7: i32):
//!     yield %7
//!   }
//! }
//! ```

use std::fmt::{self, Write};

use super::kernel::{Hint, Kernel, OpId, RegionId, Value};
use super::op::{MemScope, MemSem, Op};

impl Kernel {
    /// The text form.
    pub fn ir(&self) -> String {
        let mut s = String::with_capacity(64 * (self.ops.len() + 2));
        // Writing to a String never fails.
        let _ = self.write_ir(&mut s);
        s
    }

    /// Writes the text form.
    pub fn write_ir(&self, out: &mut impl Write) -> fmt::Result {
        write!(out, "kernel {}(", self.name)?;
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            write!(out, "{}: {} {}", p.value, self.ty(p.value), p.name)?;
        }
        out.write_str(")")?;
        if !self.constexprs.is_empty() {
            out.write_str(" [")?;
            for (i, (n, v)) in self.constexprs.iter().enumerate() {
                if i > 0 {
                    out.write_str(", ")?;
                }
                write!(out, "{n}={v}")?;
            }
            out.write_str("]")?;
        }
        out.write_str(" {\n")?;
        for (v, h) in &self.hints {
            let (name, vals) = match h {
                Hint::MultipleOf(x) => ("multiple_of", x),
                Hint::MaxContiguous(x) => ("max_contiguous", x),
            };
            writeln!(out, "  hint {name} {v}, {vals:?}")?;
        }
        for &op in &self.region(self.body).ops {
            self.write_op(out, op, 1)?;
        }
        out.write_str("}\n")
    }

    fn write_list(out: &mut impl Write, vals: &[Value]) -> fmt::Result {
        for (i, v) in vals.iter().enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            write!(out, "{v}")?;
        }
        Ok(())
    }

    fn write_op(&self, out: &mut impl Write, id: OpId, depth: usize) -> fmt::Result {
        let data = self.op(id);
        let indent = "  ".repeat(depth);
        out.write_str(&indent)?;
        if !data.results.is_empty() {
            for (i, r) in data.results.iter().enumerate() {
                if i > 0 {
                    out.write_str(", ")?;
                }
                write!(out, "{r}")?;
            }
            out.write_str(" = ")?;
        }
        let opt = |v: &Option<Value>, name: &str| match v {
            Some(v) => format!(", {name} {v}"),
            None => String::new(),
        };
        match &data.op {
            Op::ProgramId { axis } | Op::NumPrograms { axis } => {
                write!(out, "{} {axis}", data.op.name())?
            }
            Op::Constant { value } => write!(out, "constant {value}")?,
            Op::Arange { start, end } => write!(out, "arange {start}, {end}")?,
            Op::Clamp {
                src,
                lo,
                hi,
                propagate_nan,
            } => {
                write!(out, "clamp {src}, {lo}, {hi}")?;
                if *propagate_nan {
                    out.write_str(", propagate_nan")?;
                }
            }
            Op::Load { ptr, mask, other } => write!(
                out,
                "load {ptr}{}{}",
                opt(mask, "mask"),
                opt(other, "other")
            )?,
            Op::Store { ptr, value, mask } => {
                write!(out, "store {ptr}, {value}{}", opt(mask, "mask"))?
            }
            Op::AtomicRmw {
                kind,
                ptr,
                value,
                mask,
                sem,
                scope,
            } => write!(
                out,
                "atomic_{} {ptr}, {value}{}{}",
                kind.name(),
                opt(mask, "mask"),
                ordering(*sem, *scope)
            )?,
            Op::AtomicCas {
                ptr,
                cmp,
                value,
                sem,
                scope,
            } => write!(
                out,
                "atomic_cas {ptr}, {cmp}, {value}{}",
                ordering(*sem, *scope)
            )?,
            Op::ExpandDims { src, axis } => write!(out, "expand_dims {src}, axis {axis}")?,
            Op::Permute { src, order } => write!(out, "permute {src}, {order:?}")?,
            Op::Reduce {
                kind, axis, srcs, ..
            } => {
                write!(out, "reduce {} ", kind.name())?;
                Self::write_list(out, srcs)?;
                write!(out, ", axis {axis}")?;
            }
            Op::Scan {
                kind,
                axis,
                reverse,
                srcs,
                ..
            } => {
                write!(out, "scan {} ", kind.name())?;
                Self::write_list(out, srcs)?;
                write!(out, ", axis {axis}")?;
                if *reverse {
                    out.write_str(", reverse")?;
                }
            }
            Op::Philox {
                counters,
                key,
                rounds,
            } => {
                out.write_str("philox ")?;
                Self::write_list(out, counters)?;
                write!(out, ", key {}, {}, rounds {rounds}", key[0], key[1])?;
            }
            Op::For {
                lo, hi, step, init, ..
            } => {
                write!(out, "for {lo}, {hi}, {step} iter(")?;
                Self::write_list(out, init)?;
                out.write_str(")")?;
            }
            Op::While { init, .. } => {
                out.write_str("while iter(")?;
                Self::write_list(out, init)?;
                out.write_str(")")?;
            }
            other => {
                out.write_str(other.name())?;
                let ops = other.operands();
                if !ops.is_empty() {
                    out.write_str(" ")?;
                    Self::write_list(out, &ops)?;
                }
            }
        }
        if !data.results.is_empty() {
            out.write_str(" : ")?;
            for (i, r) in data.results.iter().enumerate() {
                if i > 0 {
                    out.write_str(", ")?;
                }
                write!(out, "{}", self.ty(r))?;
            }
        }
        let names: &[&str] = match data.op {
            Op::For { .. } => &["body"],
            Op::While { .. } => &["cond", "body"],
            Op::If { .. } => &["then", "else"],
            _ => &["combine"],
        };
        let mut first = true;
        for (r, name) in data.op.regions().zip(names.iter().cycle()) {
            if first {
                writeln!(out, " {name} {{")?;
            } else {
                writeln!(out, "{indent}}} {name} {{")?;
            }
            first = false;
            self.write_region(out, r, depth)?;
        }
        if !first {
            write!(out, "{indent}}}")?;
        }
        out.write_str("\n")
    }

    fn write_region(&self, out: &mut impl Write, r: RegionId, depth: usize) -> fmt::Result {
        let region = self.region(r);
        write!(out, "{}{r}(", "  ".repeat(depth))?;
        for (i, a) in region.args.iter().enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            write!(out, "{a}: {}", self.ty(*a))?;
        }
        out.write_str("):\n")?;
        for &op in &region.ops {
            self.write_op(out, op, depth + 1)?;
        }
        Ok(())
    }
}

impl fmt::Display for Kernel {
    /// The text form ([`Kernel::ir`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_ir(f)
    }
}

/// ` , sem S, scope C` for an atomic's non-default ordering and scope.
fn ordering(sem: Option<MemSem>, scope: MemScope) -> String {
    let mut s = String::new();
    if let Some(m) = sem {
        s += &format!(", sem {}", m.name());
    }
    if scope != MemScope::default() {
        s += &format!(", scope {}", scope.name());
    }
    s
}
