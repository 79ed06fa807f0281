//! The Rust half of the MLX custom primitive that runs CPU-executor kernels.
//!
//! `cpp/bridge.cpp` wraps a [`CpuLaunch`] in an MLX `Primitive`; when MLX evaluates the
//! outputs, its worker thread calls [`run_cpu_launch`] with raw buffers. Errors (and
//! panics) are stored in the launch's [`ErrorSlot`], which the output arrays carry, so they
//! come back as `Err` from `Array::eval` instead of unwinding into C++.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// Shared place where a deferred kernel records its failure.
#[derive(Debug, Default)]
pub struct ErrorSlot(Mutex<Option<Error>>);

impl ErrorSlot {
    /// Records `err` unless an earlier error is already there.
    pub fn set(&self, err: Error) {
        if let Ok(mut g) = self.0.lock() {
            g.get_or_insert(err);
        }
    }

    /// The recorded error, if any.
    pub fn get(&self) -> Option<Error> {
        self.0.lock().ok().and_then(|g| g.clone())
    }
}

/// The body of a CPU launch: reads the inputs and fills the outputs (row-major bytes).
pub type CpuBody = dyn Fn(&[&[u8]], &mut [&mut [u8]]) -> Result<()> + Send + Sync;

/// One launch handed to MLX.
pub struct CpuLaunch {
    pub(crate) kernel: String,
    pub(crate) body: Box<CpuBody>,
    pub(crate) slot: Arc<ErrorSlot>,
}

/// Called by MLX's worker thread (through the bridge) when the outputs are evaluated.
pub fn run_cpu_launch(
    launch: &CpuLaunch,
    in_ptrs: Vec<usize>,
    in_bytes: Vec<usize>,
    out_ptrs: Vec<usize>,
    out_bytes: Vec<usize>,
) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the bridge passes pointers to live MLX buffers of exactly these sizes
        // (null or any address for empty ones, which become empty slices). The inputs are
        // only read. Each output buffer was taken for this launch alone, freshly allocated
        // or recycled from an output MLX had already freed, so no live array shares it and
        // MLX runs nothing that reads the outputs before this task ends: the mutable slices
        // alias neither each other nor an input. Their bytes may be stale (outputs are not
        // zeroed unless the launch asks for a fill), which is why every reader of bool data
        // maps bytes with `!= 0`.
        let ins: Vec<&[u8]> = in_ptrs
            .iter()
            .zip(&in_bytes)
            .map(|(&p, &n)| unsafe { slice_or_empty(p, n) })
            .collect();
        let mut outs: Vec<&mut [u8]> = out_ptrs
            .iter()
            .zip(&out_bytes)
            .map(|(&p, &n)| unsafe { slice_mut_or_empty(p, n) })
            .collect();
        (launch.body)(&ins, &mut outs)
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => launch.slot.set(e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            launch.slot.set(Error::Runtime {
                kernel: launch.kernel.clone(),
                msg: format!("internal error in the CPU executor: {what}"),
            });
        }
    }
}

unsafe fn slice_or_empty<'a>(p: usize, n: usize) -> &'a [u8] {
    if n == 0 || p == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p as *const u8, n)
    }
}

unsafe fn slice_mut_or_empty<'a>(p: usize, n: usize) -> &'a mut [u8] {
    if n == 0 || p == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(p as *mut u8, n)
    }
}
