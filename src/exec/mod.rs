//! The CPU executor: runs a kernel's IR on any machine.
//!
//! Like Triton's interpreter (`GridExecutor`), it runs each program of the grid as a whole:
//! every op works on whole blocks (typed buffers), never element by element through the op
//! graph. Programs run in parallel on the calling thread and rayon's pool (`parallel`),
//! each thread reusing its value buffers from one program to the next.
//!
//! Semantics follow Triton 3.x (see the crate's design notes): integer division and
//! remainder truncate toward zero, float `%` is `fmod`, integers wrap, f16/bf16 math is
//! computed in f32 and rounded to nearest even, comparisons give `bool`, masked loads
//! without `other` give 0, masked stores leave memory untouched, `dot` accumulates in f32
//! (i32 for 8-bit integers), `max`/`min` ignore NaN, `argmax`/`argmin` pick the left-most
//! index on ties, Philox matches `triton.language.random` bit for bit. Where Triton leaves
//! a result undefined the executor picks one and never traps: integer division by zero
//! gives all ones (remainder: the dividend), over-wide shifts give 0 (or the sign for `>>`
//! on signed types), out-of-range float-to-int conversions saturate.
//!
//! Every load, store and atomic is checked against its argument's buffer; an access outside
//! it is an [`Error::Runtime`] naming the kernel, the op (and where it was built), the
//! program id and the offending element offset. Masked-off lanes are not checked.
//!
//! `native::execute_native` runs the same kernels compiled to native code instead (the
//! shared printer's C++ dialect, built with clang; `src/native/`): same arguments,
//! semantics and errors, 1.4–5.2× faster than the interpreter on the benchmark kernels (benches/README.md).
//!
//! Speed comes from doing each op as one tight loop over its block and from not repeating
//! work: ops that do not depend on the program (`arange`, constants, splats of arguments)
//! run once per worker thread; `splat(p) + offsets` feeding a load or store is never built
//! as a pointer block (the access reads `p` and the offsets, and a run of consecutive
//! offsets is one bounds check and one copy); index arithmetic such as
//! `pid * BLOCK + arange(0, BLOCK)` and masks such as `offs < n` are kept in closed form
//! (`base + stride * i`, "the first k lanes") and only written out for ops that need the
//! block; an `f32` load whose only use is a binary op is run by that op, which reads a
//! contiguous read-only run in place instead of copying it; pure ops of a `for` body that
//! do not depend on the iteration run once per loop; a loop-carried `dot` accumulator is
//! updated in place; the hot loops have AVX2/FMA versions picked at run time.
//!
//! ```
//! use std::collections::BTreeMap;
//! use triton_metal::exec::{execute, ExecArg};
//! use triton_metal::{tl, DType::{F32, I32}};
//!
//! let kernel = tl::build("add", &BTreeMap::from([("BLOCK".to_string(), 64)]), |k| {
//!     let (x, y, out) = (k.ptr(F32, "x"), k.ptr(F32, "y"), k.ptr(F32, "out"));
//!     let n = k.scalar(I32, "n");
//!     let offs = tl::program_id(0) * k.constexpr("BLOCK") + tl::arange(0, 64);
//!     let mask = offs.lt(n);
//!     tl::store(out + offs, tl::load(x + offs).mask(mask) + tl::load(y + offs).mask(mask))
//!         .mask(mask);
//! })?;
//! let n = 100usize;
//! let bytes = |v: Vec<f32>| v.into_iter().flat_map(f32::to_le_bytes).collect::<Vec<u8>>();
//! let (x, y) = (bytes(vec![1.0; n]), bytes(vec![2.0; n]));
//! let mut out = vec![0u32; n]; // u32 storage keeps the output 4-byte aligned
//! let out_bytes: &mut [u8] = unsafe {
//!     // SAFETY (example): viewing a u32 buffer as its bytes.
//!     std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), n * 4)
//! };
//! execute(&kernel, [n.div_ceil(64), 1, 1], &mut [
//!     ExecArg::from(&x[..]), ExecArg::from(&y[..]), ExecArg::from(out_bytes), ExecArg::from(n as i32),
//! ])?;
//! assert!(out.iter().all(|&b| f32::from_bits(b) == 3.0));
//! # Ok::<(), triton_metal::Error>(())
//! ```

mod data;
mod disjoint;
#[cfg(test)]
mod disjoint_tests;
mod dot;
mod elementwise;
mod interp;
mod lazy;
mod libdevice;
mod memops;
mod memory;
pub(crate) mod parallel;
#[cfg(test)]
mod parallel_tests;
mod plan;
mod reduce;
mod reduce_layout;
mod shape;
#[cfg(test)]
mod tests;

/// Helpers shared by the tests that run kernels on both CPU executors.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{execute, ExecArg};
    use crate::error::Result;
    use crate::ir::Kernel;

    /// Runs `kernel` compiled (`compiled`) or interpreted.
    pub fn run_on(
        compiled: bool,
        kernel: &Kernel,
        grid: [usize; 3],
        args: &mut [ExecArg<'_>],
    ) -> Result<()> {
        if compiled {
            crate::native::execute_native(kernel, grid, args)
        } else {
            execute(kernel, grid, args)
        }
    }

    /// The bytes of 4-byte aligned storage (f32 outputs kept as their bits).
    pub fn bytes_mut(v: &mut [u32]) -> &mut [u8] {
        // SAFETY: u32 has no padding and every byte pattern is a valid u32.
        unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 4) }
    }
}

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Kernel, Param, ParamKind, Type};
pub(crate) use data::Data;
use data::{canon_i32, class_of, f64_to_f32_class, Class};
use interp::Launch;
use memory::Mem;
pub use reduce_layout::ReduceStrategy;

/// One kernel argument, in kernel-parameter order.
///
/// Pointer parameters take a buffer: the argument's elements as row-major little-endian
/// bytes of the parameter's pointee dtype. Buffers the kernel stores to (or updates
/// atomically) must be mutable and aligned to the element size; read-only inputs may be
/// shared slices with any alignment. Scalar parameters take a number, converted to the
/// parameter's dtype (an integer that does not fit is an error).
#[derive(Debug)]
pub enum ExecArg<'a> {
    /// A read-only buffer (loads only).
    Buffer(&'a [u8]),
    /// A buffer the kernel may write.
    BufferMut(&'a mut [u8]),
    /// An integer scalar (also accepted by float parameters).
    Int(i64),
    /// A floating point scalar.
    Float(f64),
    /// A boolean scalar (`int1`).
    Bool(bool),
    /// A pointer table for an `i64` pointer parameter: the kernel reads one address per
    /// entry (`tl.load(table + g)`) and casts it to a pointer (`int_to_ptr`) to reach that
    /// entry's buffer. See [`PtrTable`].
    Table(PtrTable<'a>),
}

/// The buffers of a pointer-table argument ([`ExecArg::Table`]), each with its element
/// dtype: [`ExecArg::Buffer`] for read-only entries, [`ExecArg::BufferMut`] for ones the
/// kernel may write.
///
/// The kernel sees an `i64` array with one opaque address per entry. Only those exact
/// values cast back to pointers reach memory: a pointer cast from any other integer, or
/// to a pointee dtype other than the entry's, makes every access through it an error
/// naming the op, and accesses through valid ones are bounds-checked like any argument's.
#[derive(Debug)]
pub struct PtrTable<'a> {
    entries: Vec<(DType, ExecArg<'a>)>,
    /// The addresses the kernel reads (filled when the launch binds its arguments).
    addrs: Vec<u64>,
}

impl<'a> PtrTable<'a> {
    /// A table of `entries`, in the order the kernel indexes them.
    pub fn new(entries: Vec<(DType, ExecArg<'a>)>) -> PtrTable<'a> {
        PtrTable {
            entries,
            addrs: Vec::new(),
        }
    }
}

/// The first index above the parameters that table entries take (one index is kept for the
/// compiled executor's table of entry kinds).
fn first_entry_slot(k: &Kernel) -> usize {
    k.params.len() + 1
}

/// Most buffers (parameters and table entries together) a launch may have: slot numbers
/// from `RESERVED_SLOT_BIT` up mark pointers that can never be dereferenced.
const MAX_SLOTS: usize = RESERVED_SLOT_BIT;

/// Slot bit of a pointer cast to the wrong pointee dtype (the rest: the entry's slot).
pub(crate) const RESERVED_SLOT_BIT: usize = 0x8000;

/// Slot of a pointer cast from an integer that is no address of the launch.
pub(crate) const NOT_AN_ADDRESS: usize = 0xFFFF;

/// One pointer-table entry of a launch, for `int_to_ptr` and error messages.
#[derive(Clone, Debug)]
pub(crate) struct TableSlot {
    pub(crate) dtype: DType,
    /// `table[j]`, the table parameter's name and the entry's index.
    pub(crate) name: String,
    pub(crate) writable: bool,
}

/// The name of buffer `slot` (a parameter or a table entry) in messages.
pub(crate) fn slot_name(k: &Kernel, table: &[TableSlot], slot: usize) -> String {
    match k.params.get(slot) {
        Some(p) => format!("argument `{}`", p.name),
        None => match slot
            .checked_sub(first_entry_slot(k))
            .and_then(|j| table.get(j))
        {
            Some(t) => format!("pointer-table entry `{}`", t.name),
            None => format!("buffer #{slot}"),
        },
    }
}

/// Why an access through a pointer into `slot` failed when `slot` holds no buffer (a
/// pointer cast from an integer that was not a launch's address, or cast to a pointee
/// dtype `pointee` other than its entry's).
pub(crate) fn bad_pointer_msg(
    k: &Kernel,
    table: &[TableSlot],
    slot: usize,
    pointee: DType,
) -> String {
    if slot & RESERVED_SLOT_BIT != 0 && slot != NOT_AN_ADDRESS {
        let entry = slot & !RESERVED_SLOT_BIT;
        if let Some(t) = entry
            .checked_sub(first_entry_slot(k))
            .and_then(|j| table.get(j))
        {
            return format!(
                "the pointer was cast (int_to_ptr) to a pointer to {pointee} from the address \
                 of `{}`, an array of {}: cast it to pointer_type({})",
                t.name, t.dtype, t.dtype
            );
        }
    }
    "the pointer was cast (int_to_ptr) from an integer that is not an address of this \
     launch's pointer tables: only the addresses a ptr_table argument holds can be \
     dereferenced (offset the pointer after the cast instead of the integer)"
        .to_string()
}

/// The pointer `int_to_ptr` makes of the integer `x` as a pointer to `d`: `x` itself when it
/// is an address of an entry of `d` elements, else one that no access can go through.
#[inline(always)]
pub(crate) fn int_to_ptr(k: &Kernel, table: &[TableSlot], x: u64, d: DType) -> u64 {
    use data::{ptr_off, ptr_pack, ptr_param};
    let slot = ptr_param(x);
    let entry = slot
        .checked_sub(first_entry_slot(k))
        .and_then(|j| table.get(j));
    match entry {
        Some(t) if ptr_off(x) == 0 && t.dtype == d => x,
        Some(_) if ptr_off(x) == 0 => ptr_pack(slot | RESERVED_SLOT_BIT, 0),
        _ => ptr_pack(NOT_AN_ADDRESS, 0),
    }
}

impl<'a> From<&'a [u8]> for ExecArg<'a> {
    fn from(b: &'a [u8]) -> Self {
        ExecArg::Buffer(b)
    }
}

impl<'a> From<&'a mut [u8]> for ExecArg<'a> {
    fn from(b: &'a mut [u8]) -> Self {
        ExecArg::BufferMut(b)
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident as $c:ty),*) => {$(
        impl From<$t> for ExecArg<'_> {
            fn from(x: $t) -> Self {
                ExecArg::$v(x as $c)
            }
        }
    )*};
}
from_scalar!(i8 => Int as i64, i16 => Int as i64, i32 => Int as i64, i64 => Int as i64,
    u8 => Int as i64, u16 => Int as i64, u32 => Int as i64, f32 => Float as f64,
    f64 => Float as f64, bool => Bool as bool);

pub(crate) fn launch_err(k: &Kernel, msg: String) -> Error {
    Error::Launch {
        kernel: k.name.clone(),
        msg,
    }
}

/// Whether integer `v` is representable in `d`.
fn int_fits(v: i64, d: DType) -> bool {
    match d {
        DType::Bool => v == 0 || v == 1,
        DType::I8 => i8::try_from(v).is_ok(),
        DType::I16 => i16::try_from(v).is_ok(),
        DType::I32 => i32::try_from(v).is_ok(),
        DType::U8 => u8::try_from(v).is_ok(),
        DType::U16 => u16::try_from(v).is_ok(),
        DType::U32 => u32::try_from(v).is_ok(),
        DType::U64 => v >= 0,
        _ => true,
    }
}

/// A scalar argument as the parameter's one-element value.
fn scalar_value(k: &Kernel, p: &Param, d: DType, arg: &ExecArg<'_>) -> Result<Data> {
    let bad = |what: &str| launch_err(k, format!("argument `{}` ({d} scalar) got {what}", p.name));
    let class = class_of(&Type::scalar(d));
    Ok(match (arg, class) {
        (ExecArg::Int(v), Class::F32) => Data::F32(vec![f64_to_f32_class(*v as f64, d)]),
        (ExecArg::Int(v), Class::F64) => Data::F64(vec![*v as f64]),
        (ExecArg::Int(v), _) if !int_fits(*v, d) => {
            return Err(bad(&format!("{v}, which does not fit")))
        }
        (ExecArg::Int(v), Class::Bool) => Data::Bool(vec![*v != 0]),
        (ExecArg::Int(v), Class::I32) => Data::I32(vec![canon_i32(*v as i32, d)]),
        (ExecArg::Int(v), Class::I64) => Data::I64(vec![*v]),
        (ExecArg::Float(v), Class::F32) => Data::F32(vec![f64_to_f32_class(*v, d)]),
        (ExecArg::Float(v), Class::F64) => Data::F64(vec![*v]),
        (ExecArg::Float(v), _) => return Err(bad(&format!("the float {v}"))),
        (ExecArg::Bool(b), Class::Bool) => Data::Bool(vec![*b]),
        (ExecArg::Bool(b), Class::I32) => Data::I32(vec![*b as i32]),
        (ExecArg::Bool(b), Class::I64) => Data::I64(vec![*b as i64]),
        (ExecArg::Bool(_), _) => return Err(bad("a bool")),
        (ExecArg::Buffer(_) | ExecArg::BufferMut(_), _) => return Err(bad("a buffer")),
        (ExecArg::Table(_), _) => return Err(bad("a pointer table")),
        (ExecArg::Int(_), Class::Ptr) => return Err(bad("an integer")),
    })
}

/// A launch's arguments checked against the kernel: buffers (plain loads and stores where proven
/// disjoint) and scalar values, in parameter order, then (after one unused slot) the
/// buffers of pointer-table entries.
pub(crate) struct Bound<'a> {
    pub(crate) mems: Vec<Option<Mem<'a>>>,
    pub(crate) scalars: Vec<Option<Data>>,
    pub(crate) table: Vec<TableSlot>,
}

/// A buffer argument as a [`Mem`] of `d` elements (`what` names it in errors).
fn buffer_mem<'a>(k: &Kernel, what: &str, d: DType, arg: &'a mut ExecArg<'_>) -> Result<Mem<'a>> {
    match arg {
        ExecArg::Buffer(b) => Ok(Mem::read_only(b, d.size_bytes())),
        ExecArg::BufferMut(b) => Mem::writable(b, d.size_bytes()).ok_or_else(|| {
            launch_err(
                k,
                format!(
                    "buffer for {what} is not aligned to its {}-byte elements",
                    d.size_bytes()
                ),
            )
        }),
        _ => Err(launch_err(
            k,
            format!("{what} (pointer to {d}) needs a buffer"),
        )),
    }
}

/// Verifies the kernel and checks `args` and `grid` against it (shared by both executors).
pub(crate) fn bind<'a>(
    k: &Kernel,
    grid: [usize; 3],
    args: &'a mut [ExecArg<'_>],
) -> Result<Bound<'a>> {
    // The interpreter relies on the verifier's invariants (operand types, region shapes);
    // checking here keeps a hand-edited kernel from reaching it.
    crate::ir::verify(k)?;
    if args.len() != k.params.len() {
        return Err(launch_err(
            k,
            format!(
                "expected {} arguments ({}), got {}",
                k.params.len(),
                k.params
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                args.len()
            ),
        ));
    }
    if grid.iter().any(|&g| g > i32::MAX as usize) {
        return Err(launch_err(
            k,
            format!("grid {grid:?} exceeds i32 program ids"),
        ));
    }
    let mut mems: Vec<Option<Mem<'_>>> = Vec::with_capacity(args.len());
    let mut scalars: Vec<Option<Data>> = Vec::with_capacity(args.len());
    let mut entries: Vec<Mem<'_>> = Vec::new();
    let mut table: Vec<TableSlot> = Vec::new();
    for (p, arg) in k.params.iter().zip(args.iter_mut()) {
        match (p.kind, arg) {
            (ParamKind::Ptr(d), ExecArg::Table(t)) => {
                if !matches!(d, DType::I64 | DType::U64) || p.stored {
                    return Err(launch_err(
                        k,
                        format!(
                            "argument `{}` is a pointer table: its parameter must be a pointer \
                             to i64 that the kernel only reads (it is a pointer to {d}{})",
                            p.name,
                            if p.stored {
                                " that the kernel stores to"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                let PtrTable { entries: ts, addrs } = t;
                addrs.clear();
                for (j, (ed, e)) in ts.iter_mut().enumerate() {
                    let slot = first_entry_slot(k) + table.len();
                    if slot >= MAX_SLOTS {
                        return Err(launch_err(
                            k,
                            format!("more than {MAX_SLOTS} buffers in one launch"),
                        ));
                    }
                    let name = format!("{}[{j}]", p.name);
                    let m = buffer_mem(k, &format!("pointer-table entry `{name}`"), *ed, e)?;
                    addrs.push(data::ptr_pack(slot, 0));
                    table.push(TableSlot {
                        dtype: *ed,
                        name,
                        writable: m.is_writable(),
                    });
                    entries.push(m);
                }
                let addrs: &'a Vec<u64> = addrs;
                // SAFETY: a `u64` slice viewed as its bytes (no padding, any byte is valid);
                // the table is borrowed for `'a` and not written again during the launch.
                let bytes = unsafe {
                    std::slice::from_raw_parts(addrs.as_ptr().cast::<u8>(), addrs.len() * 8)
                };
                mems.push(Some(Mem::read_only(bytes, 8)));
                scalars.push(None);
            }
            (ParamKind::Ptr(d), ExecArg::Buffer(b)) => {
                if p.stored {
                    return Err(launch_err(
                        k,
                        format!(
                            "argument `{}` is written by the kernel: pass a mutable buffer",
                            p.name
                        ),
                    ));
                }
                mems.push(Some(Mem::read_only(b, d.size_bytes())));
                scalars.push(None);
            }
            (ParamKind::Ptr(d), ExecArg::BufferMut(b)) => {
                let m = Mem::writable(b, d.size_bytes()).ok_or_else(|| {
                    launch_err(
                        k,
                        format!(
                            "buffer for `{}` is not aligned to its {}-byte elements",
                            p.name,
                            d.size_bytes()
                        ),
                    )
                })?;
                mems.push(Some(m));
                scalars.push(None);
            }
            (ParamKind::Ptr(d), _) => {
                return Err(launch_err(
                    k,
                    format!("argument `{}` (pointer to {d}) needs a buffer", p.name),
                ))
            }
            (ParamKind::Scalar(d), arg) => {
                mems.push(None);
                scalars.push(Some(scalar_value(k, p, d, arg)?));
            }
        }
    }
    if !entries.is_empty() {
        mems.push(None);
        mems.extend(entries.into_iter().map(Some));
    }
    let ints: Vec<Option<i64>> = scalars
        .iter()
        .map(|s| match s {
            Some(Data::I32(v)) if v.len() == 1 => Some(v[0] as i64),
            Some(Data::I64(v)) if v.len() == 1 => Some(v[0]),
            _ => None,
        })
        .collect();
    for (m, disjoint) in mems
        .iter_mut()
        .zip(disjoint::disjoint_stores(k, grid, &ints))
    {
        if let (Some(mem), true) = (m.as_mut(), disjoint) {
            // SAFETY: `disjoint_stores` proved, for this kernel, grid and these scalar
            // arguments, that no element one program stores is loaded or stored by another
            // program, and that nothing runs an atomic on this buffer.
            *mem = unsafe { mem.assume_disjoint() };
        }
    }
    Ok(Bound {
        mems,
        scalars,
        table,
    })
}

/// Runs `kernel` over `grid` (programs per axis) on the CPU.
///
/// `args` follow [`Kernel::params`] (constexprs are already folded into the kernel). All
/// programs run before this returns; outputs are written into the mutable buffers. Errors:
/// [`Error::Build`] for a kernel that fails the IR verifier, [`Error::Launch`] for
/// arguments that do not match the parameters, [`Error::Runtime`]
/// for failures while running (out-of-bounds accesses, writes through read-only buffers),
/// naming the op and program. A failure stops the launch early (programs not yet started
/// do not run); the program named is the lowest-numbered one that failed, whatever the
/// thread schedule.
pub fn execute(kernel: &Kernel, grid: [usize; 3], args: &mut [ExecArg<'_>]) -> Result<()> {
    execute_with(kernel, grid, args, None)
}

/// [`execute`], with builtin reductions combined in the order of a GPU reduction layout
/// ([`ReduceStrategy`]; `None`: the executor's fastest order).
pub fn execute_with(
    kernel: &Kernel,
    grid: [usize; 3],
    args: &mut [ExecArg<'_>],
    reduce_strategy: Option<ReduceStrategy>,
) -> Result<()> {
    let k = kernel;
    let Bound {
        mems,
        scalars,
        table,
    } = bind(k, grid, args)?;
    let read_only: Vec<bool> = mems
        .iter()
        .map(|m| m.as_ref().is_some_and(|m| !m.is_writable()))
        .collect();
    let launch = Launch {
        kernel: k,
        params: Launch::param_data(k, &scalars),
        mems,
        grid,
        plan: plan::Plan::new(k, &read_only),
        reduce_strategy,
        table,
    };
    let total = grid
        .iter()
        .try_fold(1usize, |a, &g| a.checked_mul(g))
        .ok_or_else(|| launch_err(k, format!("grid {grid:?} is too large")))?;
    let pid = |p: usize| {
        [
            p % grid[0],
            (p / grid[0]) % grid[1],
            p / (grid[0] * grid[1]),
        ]
    };
    // Many pieces per thread: programs can be uneven, and a counter update per piece is
    // cheap next to a few dozen programs.
    parallel::run_pieces(
        total,
        32,
        || launch.env(),
        |env, mut programs| programs.try_for_each(|p| launch.run_program(env.get(), pid(p))),
    )
}
