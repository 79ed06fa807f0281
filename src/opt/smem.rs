//! Threadgroup (shared) memory of one kernel: every buffer the printed code moves data
//! through, each a layout conversion of a value with its live range, placed in one arena
//! with liveness-based reuse under the profile's exact byte budget.
//!
//! Data never stays in threadgroup memory from one op to the next (each op writes its
//! buffers and reads them back before it ends), so a buffer is live only at its op's
//! moments: before the op's main work (an accumulator entering matrix fragments, for a
//! `for` loop before the loop), during it, and after it (fragments leaving, for a `for`
//! after the loop). [`moments`] numbers those moments in program order; two buffers whose
//! moment intervals do not overlap may share bytes, and [`Arena::place`] packs them so.
//! Barriers guard every reuse: [`super::barriers`] puts one between a read of a buffer and
//! a later write of any buffer sharing its bytes.
//!
//! ```
//! use triton_metal::opt::smem::{Arena, Request, Role};
//! use triton_metal::{ir::OpId, tl, DType};
//! let k = tl::jit("two", |k| {
//!     let x = k.ptr(DType::F32, "x");
//!     let o = k.ptr(DType::F32, "o");
//!     let v = tl::load(x + tl::arange(0, 64));
//!     tl::store(o + tl::program_id(0), v.sum(0) + v.max(0));
//! })?.specialize_with(&[])?;
//! let reduces: Vec<OpId> = (0..k.ops.len() as u32).map(OpId)
//!     .filter(|&o| k.op(o).op.name() == "reduce").collect();
//! let reqs: Vec<Request> = reduces.iter()
//!     .map(|&op| Request { op, role: Role::Reduce, dtype: DType::F32, elems: 256 })
//!     .collect();
//! let mut a = Arena::new(32768, "test budget".into());
//! a.place(&k, &reqs);
//! // The two reductions never run at once: one kilobyte serves both.
//! assert_eq!(a.bytes, 1024);
//! assert!(a.buffers.iter().all(|b| b.offset == 0));
//! # Ok::<(), triton_metal::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Kernel, Op, OpId, Value};

/// Alignment of every buffer in the arena, in bytes (`float4`, `ldmatrix` rows and
/// 16-byte vector stores).
pub const ALIGN: usize = 16;

/// What a buffer converts, which fixes its layouts and when it is live within its op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// `tl.dot` operands A and B: blocked -> staged tiles (during the op).
    Operands,
    /// An accumulator entering matrix fragments: blocked -> fragments (before the op's
    /// main work; for a `for` whose accumulator stays in fragments, before the loop).
    AccIn,
    /// An accumulator leaving matrix fragments: fragments -> blocked (after the op's main
    /// work; for a `for`, after the loop).
    AccOut,
    /// A reduction's partials: blocked -> reduction scratch (the whole op).
    Reduce,
    /// A scan's elements: blocked -> scan scratch (the whole op).
    Scan,
    /// A shape op's elements (broadcast, permute, join, split, reshape to a scalar):
    /// blocked -> blocked of the new shape (the whole op).
    Shape,
    /// A scalar atomic's old value, from the thread that updated to all (the whole op).
    Atomic,
    /// The staging buffers of a `for` loop whose `tl.dot` operand loads are issued ahead
    /// (`Decision::Ahead`): blocked -> staged tiles, live through the whole loop body (not
    /// before or after the loop).
    Ring,
    /// A loop-invariant `tl.dot` operand A of a `for` body, staged once before the loop
    /// (`KernelPlan::hoists`): blocked -> staged tile, live through the whole loop.
    Hoisted,
}

impl Role {
    const ALL: [Role; 9] = [
        Role::Operands,
        Role::AccIn,
        Role::AccOut,
        Role::Reduce,
        Role::Scan,
        Role::Shape,
        Role::Atomic,
        Role::Ring,
        Role::Hoisted,
    ];

    /// The role's name in the plan's text form.
    pub fn name(self) -> &'static str {
        match self {
            Role::Operands => "dot.operands",
            Role::AccIn => "acc.in",
            Role::AccOut => "acc.out",
            Role::Reduce => "reduce",
            Role::Scan => "scan",
            Role::Shape => "shape",
            Role::Atomic => "atomic",
            Role::Ring => "dot.ring",
            Role::Hoisted => "dot.hoisted",
        }
    }

    /// A short tag for generated identifiers.
    pub fn tag(self) -> &'static str {
        match self {
            Role::Operands => "opnd",
            Role::AccIn => "accin",
            Role::AccOut => "accout",
            Role::Reduce => "red",
            Role::Scan => "scan",
            Role::Shape => "shape",
            Role::Atomic => "atom",
            Role::Ring => "ring",
            Role::Hoisted => "hoist",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == s)
    }

    /// The role of the buffers of `op` other than a `tl.dot`'s.
    pub fn of_op(op: &Op) -> Role {
        match op {
            Op::Reduce { .. } => Role::Reduce,
            Op::Scan { .. } => Role::Scan,
            Op::AtomicRmw { .. } | Op::AtomicCas { .. } => Role::Atomic,
            _ => Role::Shape,
        }
    }

    /// `(from, to)`: the layouts of the conversion a buffer of this role carries.
    pub fn layouts(self) -> (&'static str, &'static str) {
        match self {
            Role::Operands => ("blocked", "dot.staged"),
            Role::AccIn => ("blocked", "fragments"),
            Role::AccOut => ("fragments", "blocked"),
            Role::Reduce => ("blocked", "reduce.scratch"),
            Role::Scan => ("blocked", "scan.scratch"),
            Role::Shape => ("blocked", "blocked"),
            Role::Atomic => ("scalar", "uniform"),
            Role::Ring => ("blocked", "dot.staged"),
            Role::Hoisted => ("blocked", "dot.staged"),
        }
    }
}

/// A buffer a conversion needs: `elems` elements of `dtype` for `role` while `op` runs
/// ([`super::buffers::requests`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The op that converts through it.
    pub op: OpId,
    /// What it converts.
    pub role: Role,
    /// Element type.
    pub dtype: DType,
    /// Elements.
    pub elems: usize,
}

/// One buffer of the arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// The op that converts through it.
    pub op: OpId,
    /// What it converts.
    pub role: Role,
    /// Element type.
    pub dtype: DType,
    /// Bytes (a multiple of [`ALIGN`]).
    pub bytes: usize,
    /// First and last moment it is live ([`moments`]).
    pub live: (u32, u32),
    /// Byte offset in the arena (a multiple of [`ALIGN`]).
    pub offset: usize,
    /// The values whose layout changes through it (the `convert` record of the plan's text:
    /// from and to are [`Role::layouts`]).
    pub values: Vec<Value>,
}

impl Buffer {
    /// The identifier the printers give its view of the arena.
    pub fn ident(op: OpId, role: Role, dtype: DType) -> String {
        format!("tm_s{}_{}_{}", op.index(), role.tag(), dtype.short_name())
    }

    fn overlaps_in_time(&self, o: &Buffer) -> bool {
        self.live.0 <= o.live.1 && o.live.0 <= self.live.1
    }

    fn overlaps_in_bytes(&self, o: &Buffer) -> bool {
        self.offset < o.offset + o.bytes && o.offset < self.offset + self.bytes
    }
}

/// The values op `op` converts through a buffer of `role`: a dot's A and B (operands), its
/// accumulator (in) or result (out); a reduction's or scan's sources; a scalar atomic's
/// result; a shape op's block operands. A `for` keeping accumulators in fragments lists
/// none here: the plan knows which of its carried values they are
/// (`KernelPlan::place_buffers`).
pub fn converted(k: &Kernel, op: OpId, role: Role) -> Vec<Value> {
    let data = k.op(op);
    match (&data.op, role) {
        (Op::Dot { a, b, .. }, Role::Operands) => vec![*a, *b],
        (Op::Dot { acc, .. }, Role::AccIn) => vec![*acc],
        (Op::Dot { .. }, Role::AccOut) => data.result().into_iter().collect(),
        (Op::For { .. }, _) => Vec::new(),
        (Op::Reduce { srcs, .. } | Op::Scan { srcs, .. }, _) => srcs.clone(),
        (Op::AtomicRmw { .. } | Op::AtomicCas { .. }, _) => data.results.iter().collect(),
        (o, _) => {
            let mut v = Vec::new();
            o.for_each_operand(|x| {
                if k.ty(x).is_block() && !v.contains(&x) {
                    v.push(x);
                }
            });
            v
        }
    }
}

/// Per op (by index): its moments `[before, during, after]`, numbered in program order;
/// the moments of the ops of its regions (a loop's body) lie between `during` and `after`.
pub fn moments(k: &Kernel) -> Vec<[u32; 3]> {
    fn walk(k: &Kernel, r: crate::ir::RegionId, next: &mut u32, out: &mut Vec<[u32; 3]>) {
        for &id in &k.region(r).ops {
            let before = *next;
            *next += 2;
            for sub in k.op(id).op.regions() {
                walk(k, sub, next, out);
            }
            if let Some(m) = out.get_mut(id.index()) {
                *m = [before, before + 1, *next];
            }
            *next += 1;
        }
    }
    let mut out = vec![[0; 3]; k.ops.len()];
    let mut next = 0;
    walk(k, k.body, &mut next, &mut out);
    out
}

/// The threadgroup memory of one kernel: its buffers, placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arena {
    /// Bytes one program may use.
    pub limit: usize,
    /// The profile field (or dialect limit) that set [`Self::limit`].
    pub limit_why: String,
    /// Whether buffers whose live ranges do not overlap share bytes (on by default; off
    /// gives every buffer bytes of its own).
    pub reuse: bool,
    /// The buffers, by op and role.
    pub buffers: Vec<Buffer>,
    /// Bytes of the arena: the end of its last buffer.
    pub bytes: usize,
}

impl Arena {
    /// An empty arena of `limit` bytes with reuse on.
    pub fn new(limit: usize, limit_why: String) -> Arena {
        Arena {
            limit,
            limit_why,
            reuse: true,
            buffers: Vec::new(),
            bytes: 0,
        }
    }

    /// The buffer of `role` and `dtype` that `op` converts through.
    pub fn find(&self, op: OpId, role: Role, dtype: DType) -> Option<&Buffer> {
        self.buffers
            .iter()
            .find(|b| b.op == op && b.role == role && b.dtype == dtype)
    }

    /// Replaces the buffers with `reqs` (merged per op, role and dtype: the largest
    /// request) and places them: largest first, each at the lowest aligned offset that
    /// overlaps no placed buffer live at the same time (with [`Self::reuse`] off, no placed
    /// buffer at all).
    pub fn place(&mut self, k: &Kernel, reqs: &[Request]) {
        let mo = moments(k);
        let mut merged: BTreeMap<(OpId, Role, DType), usize> = BTreeMap::new();
        for r in reqs {
            let e = merged.entry((r.op, r.role, r.dtype)).or_insert(0);
            *e = (*e).max(r.elems);
        }
        let mut bufs: Vec<Buffer> = merged
            .into_iter()
            .map(|((op, role, dtype), elems)| {
                let m = mo.get(op.index()).copied().unwrap_or([0; 3]);
                let live = match role {
                    Role::Operands => (m[1], m[1]),
                    Role::AccIn => (m[0], m[0]),
                    Role::AccOut => (m[2], m[2]),
                    // The body's moments lie strictly between the loop's `during` and
                    // `after`.
                    Role::Ring => (m[1], m[2].saturating_sub(1).max(m[1])),
                    // Written before the loop, read in its body, dead once it ends.
                    Role::Hoisted => (m[0], m[2].saturating_sub(1).max(m[0])),
                    _ => (m[0], m[2]),
                };
                Buffer {
                    op,
                    role,
                    dtype,
                    bytes: (elems * dtype.size_bytes())
                        .next_multiple_of(ALIGN)
                        .max(ALIGN),
                    live,
                    offset: 0,
                    values: converted(k, op, role),
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..bufs.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(bufs[i].bytes), bufs[i].live.0, i));
        let mut placed: Vec<usize> = Vec::new();
        for i in order {
            let mut taken: Vec<(usize, usize)> = placed
                .iter()
                .map(|&j| &bufs[j])
                .filter(|o| !self.reuse || o.overlaps_in_time(&bufs[i]))
                .map(|o| (o.offset, o.offset + o.bytes))
                .collect();
            taken.sort();
            let mut at = 0;
            for (lo, hi) in taken {
                if at + bufs[i].bytes <= lo {
                    break;
                }
                at = at.max(hi);
            }
            bufs[i].offset = at;
            placed.push(i);
        }
        self.bytes = bufs.iter().map(|b| b.offset + b.bytes).max().unwrap_or(0);
        self.buffers = bufs;
    }

    /// Checks the placement: aligned, no two buffers live at the same time share a byte,
    /// [`Self::bytes`] covers every buffer, and each buffer's op exists.
    pub fn verify(&self, k: &Kernel, kernel: &str) -> Result<()> {
        let bad = |msg: String| {
            Err(Error::InvalidArgument(format!(
                "layout plan of `{kernel}`: threadgroup memory: {msg}"
            )))
        };
        for (i, b) in self.buffers.iter().enumerate() {
            if b.op.index() >= k.ops.len() {
                return bad(format!("buffer #{i} of {}: no such op", b.op));
            }
            if b.values.iter().any(|v| v.index() >= k.values.len()) {
                return bad(format!("buffer #{i} converts a value the kernel lacks"));
            }
            if b.offset % ALIGN != 0 || b.bytes % ALIGN != 0 {
                return bad(format!("buffer #{i} is not {ALIGN}-byte aligned"));
            }
            if b.offset + b.bytes > self.bytes {
                return bad(format!(
                    "buffer #{i} ends at byte {} of a {}-byte arena",
                    b.offset + b.bytes,
                    self.bytes
                ));
            }
            for (j, o) in self.buffers.iter().enumerate().skip(i + 1) {
                let shared = self.reuse && !b.overlaps_in_time(o);
                if !shared && b.overlaps_in_bytes(o) {
                    return bad(format!(
                        "buffers #{i} and #{j} are live together and overlap at bytes {}..{}",
                        b.offset.max(o.offset),
                        (b.offset + b.bytes).min(o.offset + o.bytes)
                    ));
                }
            }
        }
        Ok(())
    }

    /// An error when the arena is over [`Self::limit`]: names the kernel, the op of the
    /// largest buffer live when the most bytes are, its source line, the byte counts and
    /// what to shrink. `memory` names the memory ("threadgroup memory on M1").
    pub fn within_limit(&self, k: &Kernel, memory: &str) -> Result<usize> {
        if self.bytes <= self.limit {
            return Ok(self.bytes);
        }
        // The moment the most bytes are live, and its largest buffer.
        let live_bytes = |t: u32| -> usize {
            self.buffers
                .iter()
                .filter(|b| b.live.0 <= t && t <= b.live.1)
                .map(|b| b.bytes)
                .sum()
        };
        let peak = self
            .buffers
            .iter()
            .map(|b| b.live.0)
            .max_by_key(|&t| live_bytes(t))
            .unwrap_or(0);
        let big = self
            .buffers
            .iter()
            .filter(|b| b.live.0 <= peak && peak <= b.live.1)
            .max_by_key(|b| b.bytes);
        let by = match big {
            Some(b) => {
                let o = k.op(b.op);
                format!(
                    "The largest use is {} bytes of {} ({} of `{}` at {})",
                    b.bytes,
                    b.dtype,
                    b.role.name(),
                    o.op.name(),
                    o.loc
                )
            }
            None => "No single buffer".to_string(),
        };
        Err(Error::Launch {
            kernel: k.name.clone(),
            msg: format!(
                "needs {} bytes of {memory}, which allows {} ({}). {by}: use smaller BLOCK \
                 sizes there (for `tl.dot`, a smaller BLOCK_SIZE_M/N/K), fewer stages or fewer \
                 layout conversions",
                self.bytes, self.limit, self.limit_why
            ),
        })
    }
}

impl fmt::Display for Arena {
    /// `arena bytes=B limit=L reuse=on ; why`, then per buffer two lines: the buffer
    /// (`buf #i opN role dtype bytes=B live=F..L at=O`) and the conversion it carries
    /// (`convert opN %a,%b from -> to via #i`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  arena bytes={} limit={} reuse={} ; {}",
            self.bytes,
            self.limit,
            if self.reuse { "on" } else { "off" },
            self.limit_why
        )?;
        for (i, b) in self.buffers.iter().enumerate() {
            writeln!(
                f,
                "  buf #{i} {} {} {} bytes={} live={}..{} at={}",
                b.op,
                b.role.name(),
                b.dtype.short_name(),
                b.bytes,
                b.live.0,
                b.live.1,
                b.offset
            )?;
            let (from, to) = b.role.layouts();
            let vals: Vec<String> = b.values.iter().map(|v| format!("%{}", v.index())).collect();
            let vals = if vals.is_empty() {
                "-".to_string()
            } else {
                vals.join(",")
            };
            writeln!(f, "  convert {} {vals} {from} -> {to} via #{i}", b.op)?;
        }
        Ok(())
    }
}

/// Parses an `arena` line of the plan's text form into an empty arena.
pub(crate) fn parse_arena(line: &str) -> Option<Arena> {
    let (body, why) = line.trim().split_once(" ; ")?;
    let w: Vec<&str> = body.split_whitespace().collect();
    match w.as_slice() {
        ["arena", b, l, r] => Some(Arena {
            bytes: b.strip_prefix("bytes=")?.parse().ok()?,
            limit: l.strip_prefix("limit=")?.parse().ok()?,
            reuse: match r.strip_prefix("reuse=")? {
                "on" => true,
                "off" => false,
                _ => return None,
            },
            limit_why: why.to_string(),
            buffers: Vec::new(),
        }),
        _ => None,
    }
}

/// Parses a `buf` line of the plan's text form (its values come from its `convert` line).
pub(crate) fn parse_buffer(line: &str) -> Option<Buffer> {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["buf", _, op, role, dt, bytes, live, at] => {
            let (lo, hi) = live.strip_prefix("live=")?.split_once("..")?;
            Some(Buffer {
                op: OpId(op.strip_prefix("op")?.parse().ok()?),
                role: Role::parse(role)?,
                dtype: DType::parse(dt)?,
                bytes: bytes.strip_prefix("bytes=")?.parse().ok()?,
                live: (lo.parse().ok()?, hi.parse().ok()?),
                offset: at.strip_prefix("at=")?.parse().ok()?,
                values: Vec::new(),
            })
        }
        _ => None,
    }
}

/// Parses a `convert` line into `buffers`: the values of the buffer it goes through, which
/// must be of the same op and carry the same layouts.
pub(crate) fn parse_convert(line: &str, buffers: &mut [Buffer]) -> Option<()> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let ["convert", op, vals, from, "->", to, "via", at] = w.as_slice() else {
        return None;
    };
    let i: usize = at.strip_prefix('#')?.parse().ok()?;
    let b = buffers.get_mut(i)?;
    let op = OpId(op.strip_prefix("op")?.parse().ok()?);
    if op != b.op || b.role.layouts() != (*from, *to) {
        return None;
    }
    if *vals != "-" {
        b.values = vals
            .split(',')
            .map(|v| v.strip_prefix('%')?.parse().ok().map(Value))
            .collect::<Option<_>>()?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{tl, DType::F32, DType::I32};

    /// Two reductions of one loaded block, and their op ids.
    fn two_reductions() -> (std::sync::Arc<Kernel>, OpId, OpId) {
        let k = tl::jit("two", |k| {
            let x = k.ptr(F32, "x");
            let o = k.ptr(F32, "o");
            let v = tl::load(x + tl::arange(0, 64));
            tl::store(o + tl::program_id(0), v.sum(0) + v.max(0));
        })
        .unwrap()
        .specialize_with(&[])
        .unwrap();
        let r: Vec<OpId> = (0..k.ops.len() as u32)
            .map(OpId)
            .filter(|&o| k.op(o).op.name() == "reduce")
            .collect();
        (k, r[0], r[1])
    }

    fn req(op: OpId, dtype: DType, elems: usize) -> Request {
        Request {
            op,
            role: Role::Reduce,
            dtype,
            elems,
        }
    }

    #[test]
    fn buffers_live_together_get_their_own_bytes_and_others_share() {
        let (k, r0, r1) = two_reductions();
        let reqs = [
            req(r0, F32, 100),
            req(r0, I32, 64),
            req(r1, F32, 32),
            req(r0, F32, 40),
        ];
        let mut a = Arena::new(32768, "test".into());
        a.place(&k, &reqs);
        // r0's two buffers (400 -> 400 bytes, 256) are live together; r1's reuses offset 0.
        assert_eq!(a.buffers.len(), 3);
        let f = |op, dt| a.find(op, Role::Reduce, dt).unwrap().clone();
        assert_eq!((f(r0, F32).offset, f(r0, F32).bytes), (0, 400));
        assert_eq!((f(r0, I32).offset, f(r0, I32).bytes), (400, 256));
        assert_eq!(f(r1, F32).offset, 0);
        assert_eq!(a.bytes, 656);
        a.verify(&k, "two").unwrap();
        // Without reuse every buffer has bytes of its own.
        let mut b = Arena::new(32768, "test".into());
        b.reuse = false;
        b.place(&k, &reqs);
        assert_eq!(b.bytes, 656 + 128);
        b.verify(&k, "two").unwrap();
        // A placement that overlaps buffers live together is refused.
        let mut bad = a.clone();
        for b in &mut bad.buffers {
            b.offset = 0;
        }
        let e = bad.verify(&k, "two").unwrap_err().to_string();
        assert!(e.contains("live together and overlap"), "{e}");
    }

    #[test]
    fn moments_put_loop_bodies_between_during_and_after() {
        let (k, r0, r1) = two_reductions();
        let m = moments(&k);
        assert!(m[r0.index()][2] < m[r1.index()][0]);
        assert!(m.iter().all(|x| x[0] < x[1] && x[1] < x[2]));
    }

    #[test]
    fn over_the_limit_names_the_op_its_line_and_the_bytes() {
        let (k, r0, _) = two_reductions();
        let mut a = Arena::new(256, "a small test budget".into());
        a.place(&k, &[req(r0, F32, 100)]);
        let e = a
            .within_limit(&k, "threadgroup memory")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs 400 bytes of threadgroup memory"), "{e}");
        assert!(e.contains("allows 256 (a small test budget)"), "{e}");
        assert!(e.contains("reduce of `reduce` at src/opt/smem.rs:"), "{e}");
    }

    #[test]
    fn text_lines_parse_back() {
        let (k, r0, r1) = two_reductions();
        let mut a = Arena::new(32768, "why".into());
        a.place(&k, &[req(r0, F32, 100), req(r1, I32, 8)]);
        let text = a.to_string();
        let mut lines = text.lines();
        let mut b = parse_arena(lines.next().unwrap()).unwrap();
        for l in lines {
            match parse_buffer(l) {
                Some(buf) => b.buffers.push(buf),
                None => parse_convert(l, &mut b.buffers).unwrap(),
            }
        }
        assert_eq!(a, b, "{text}");
        let src = match &k.op(r0).op {
            Op::Reduce { srcs, .. } => srcs[0],
            _ => unreachable!(),
        };
        assert!(
            text.contains(&format!(
                "convert {r0} %{} blocked -> reduce.scratch via #",
                src.index()
            )),
            "{text}"
        );
    }
}
