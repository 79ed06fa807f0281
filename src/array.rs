//! [`Array`]: a safe handle to an MLX array.

use std::fmt;
use std::sync::Arc;

use cxx::UniquePtr;
#[cfg(feature = "ndarray")]
use ndarray::{ArrayBase, ArrayD, Data, Dimension, IxDyn};

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::ffi::bridge::{self, MlxArray};
use crate::ffi::cpu_primitive::ErrorSlot;
use crate::ffi::programs::name_programs;

/// An MLX array: lazily computed, reference counted, owned by MLX.
///
/// Cloning is a reference-count bump, never a copy. Operations (in [`crate::mlx`] and
/// kernel launches) return new lazy arrays; data is computed on [`Array::eval`] or when it
/// is read ([`Array::to_vec`], or `Array::to_ndarray` with feature `ndarray`).
///
/// # Threads
/// `Array` is `Send` and `Sync`: MLX arrays are immutable once built and their reference
/// counts are atomic, so arrays may be created, moved and shared between threads, and
/// each thread may build and evaluate its own graphs concurrently. MLX records lazy work on
/// the *current thread's* stream, so a lazy array must be evaluated on the thread that
/// built it (or be evaluated before it is handed over); evaluating another thread's lazy
/// graph returns `Err` with MLX's message ("There is no Stream(cpu, N) in current thread").
/// Evaluated arrays can be read from any thread. `tests/array.rs::arrays_from_many_threads`
/// checks all three statements.
pub struct Array {
    inner: UniquePtr<MlxArray>,
    /// Errors of deferred CPU kernels this array depends on; checked at eval.
    pending: Arc<[Arc<ErrorSlot>]>,
}

impl Clone for Array {
    fn clone(&self) -> Self {
        Array {
            inner: bridge::array_clone(self.raw()),
            pending: self.pending.clone(),
        }
    }
}

pub(crate) fn dims_to_i32(shape: &[usize], what: &str) -> Result<Vec<i32>> {
    shape
        .iter()
        .map(|&d| {
            i32::try_from(d).map_err(|_| {
                Error::InvalidArgument(format!("{what}: dimension {d} does not fit in MLX's int32"))
            })
        })
        .collect()
}

impl Array {
    pub(crate) fn from_raw(inner: UniquePtr<MlxArray>, pending: Arc<[Arc<ErrorSlot>]>) -> Array {
        Array { inner, pending }
    }

    pub(crate) fn raw(&self) -> &MlxArray {
        // The pointer is never null: every constructor checks it.
        self.inner.as_ref().expect("MLX array handle is never null") // ok: invariant
    }

    pub(crate) fn pending(&self) -> &Arc<[Arc<ErrorSlot>]> {
        &self.pending
    }

    /// Merges the pending-error lists of several arrays (for ops over them).
    pub(crate) fn merged_pending(arrays: &[&Array]) -> Arc<[Arc<ErrorSlot>]> {
        let mut all: Vec<Arc<ErrorSlot>> = Vec::new();
        for a in arrays {
            for s in a.pending.iter() {
                if !all.iter().any(|x| Arc::ptr_eq(x, s)) {
                    all.push(s.clone());
                }
            }
        }
        all.into()
    }

    pub(crate) fn wrap(ptr: UniquePtr<MlxArray>, pending: Arc<[Arc<ErrorSlot>]>) -> Result<Array> {
        if ptr.is_null() {
            return Err(Error::Mlx("MLX returned a null array".into()));
        }
        Ok(Array::from_raw(ptr, pending))
    }

    /// Builds an array from row-major `data` with the given `shape`.
    ///
    /// ```
    /// let a = triton_metal::Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// assert_eq!(a.shape(), vec![2, 2]);
    /// # Ok::<(), triton_metal::Error>(())
    /// ```
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Result<Array> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::InvalidArgument(format!(
                "Array::from_slice: shape {shape:?} needs {n} elements but {} were given",
                data.len()
            )));
        }
        let shape32 = dims_to_i32(shape, "Array::from_slice")?;
        // SAFETY: `Element` guarantees T is plain data of T::DTYPE's size.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data))
        };
        Array::wrap(
            bridge::array_from_bytes(bytes, &shape32, T::DTYPE.into())?,
            Arc::from([]),
        )
    }

    /// Builds a 1-D array.
    pub fn from_vec<T: Element>(data: Vec<T>) -> Result<Array> {
        let n = data.len();
        Array::from_slice(&data, &[n])
    }

    /// Builds a 0-d array holding `value`.
    pub fn scalar<T: Element>(value: T) -> Result<Array> {
        Array::from_slice(&[value], &[])
    }

    /// Builds an array from any ndarray (owned, view, transposed or strided); the data
    /// is copied in logical (row-major) order. Feature `ndarray`.
    #[cfg(feature = "ndarray")]
    pub fn from_ndarray<T, S, D>(a: &ArrayBase<S, D>) -> Result<Array>
    where
        T: Element,
        S: Data<Elem = T>,
        D: Dimension,
    {
        let shape = a.shape().to_vec();
        match a.as_slice() {
            Some(s) => Array::from_slice(s, &shape),
            None => {
                let v: Vec<T> = a.iter().copied().collect();
                Array::from_slice(&v, &shape)
            }
        }
    }

    /// Dimensions.
    pub fn shape(&self) -> Vec<usize> {
        bridge::array_shape(self.raw())
            .into_iter()
            .map(|d| d.max(0) as usize)
            .collect()
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        bridge::array_size(self.raw())
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        // The bridge maps every MLX dtype we can create; complex arrays never reach Rust.
        bridge::array_dtype(self.raw())
            .dtype()
            .unwrap_or(DType::F32)
    }

    /// Strides in elements. Before evaluation these are the row-major strides of
    /// [`Array::shape`]; after, they are MLX's actual strides (e.g. a transpose is a view).
    pub fn strides(&self) -> Vec<usize> {
        bridge::array_strides(self.raw())
            .into_iter()
            .map(|s| s.max(0) as usize)
            .collect()
    }

    /// An identifier that is the same for clones of one MLX array.
    pub fn id(&self) -> usize {
        bridge::array_id(self.raw())
    }

    /// Computes the array (and everything it depends on). Errors of kernels that ran
    /// deferred inside MLX (for example an out-of-bounds access on the CPU executor) are
    /// returned here.
    pub fn eval(&self) -> Result<()> {
        bridge::array_eval(self.raw()).map_err(|e| name_programs(e.into()))?;
        self.check_pending()
    }

    /// Evaluates several arrays together (MLX schedules them as one graph).
    pub fn eval_all(arrays: &[&Array]) -> Result<()> {
        let ptrs: Vec<*const MlxArray> = arrays.iter().map(|a| a.raw() as *const _).collect();
        // SAFETY: the pointers come from live `Array`s borrowed for this call.
        unsafe { bridge::array_eval_many(&ptrs).map_err(|e| name_programs(e.into()))? };
        arrays.iter().try_for_each(|a| a.check_pending())
    }

    fn check_pending(&self) -> Result<()> {
        match self.pending.iter().find_map(|s| s.get()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Evaluates and copies the elements out in row-major order. `T` must match
    /// [`Array::dtype`] (use [`crate::mlx::astype`] to convert).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::InvalidArgument(format!(
                "Array::to_vec::<{}>: the array holds {}",
                T::DTYPE,
                self.dtype()
            )));
        }
        let n = self.size();
        let mut out: Vec<T> = Vec::new();
        self.copy_out(&mut out, n * std::mem::size_of::<T>())?;
        if T::DTYPE == DType::Bool {
            // A bool output a kernel never wrote (uninitialised or a recycled buffer) may
            // hold any byte; only 0 and 1 are valid `bool`s.
            let p = out.as_mut_ptr() as *mut u8;
            for i in 0..n {
                // SAFETY: `copy_out` initialised `n` bytes at `p` (one per bool element);
                // they are read and written as bytes before any is read as a `bool`.
                unsafe { *p.add(i) = (*p.add(i) != 0) as u8 };
            }
        }
        // SAFETY: `copy_out` initialised the first `n` elements' bytes; `Element` makes every
        // bit pattern of a non-bool dtype a valid T, and bool bytes were mapped to 0/1 above.
        unsafe { out.set_len(n) };
        Ok(out)
    }

    /// Evaluates and copies the row-major bytes (`len` of them) into the spare capacity of
    /// the empty `out`, which it first reserves without aborting: a copy larger than the
    /// memory left is an `Err`. The caller sets the length.
    fn copy_out<T>(&self, out: &mut Vec<T>, len: usize) -> Result<()> {
        self.eval()?;
        let c = bridge::array_contiguous_cpu(self.raw())?;
        let c = c
            .as_ref()
            .ok_or_else(|| Error::Mlx("MLX returned no array".into()))?;
        let got = bridge::array_nbytes(c);
        if got != len {
            return Err(Error::Mlx(format!(
                "MLX holds {got} bytes for {} elements of {}",
                self.size(),
                self.dtype()
            )));
        }
        let elems = len.div_ceil(std::mem::size_of::<T>().max(1));
        out.try_reserve_exact(elems).map_err(|_| {
            Error::Mlx(format!(
                "[triton_metal] unable to allocate {len} bytes to copy an array of shape {:?} \
                 and dtype {} out of MLX (not enough memory)",
                self.shape(),
                self.dtype()
            ))
        })?;
        // SAFETY: `out` has capacity for at least `len` bytes; C++ writes exactly `len`
        // bytes there (after checking that the array holds that many) and nothing else.
        unsafe { bridge::array_copy_bytes(c, out.as_mut_ptr() as *mut u8, len)? };
        Ok(())
    }

    /// Evaluates and returns the raw row-major bytes (as MLX stores the dtype).
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>> {
        let len = self.size() * self.dtype().size_bytes();
        let mut out = Vec::new();
        self.copy_out(&mut out, len)?;
        // SAFETY: `copy_out` initialised `len` bytes.
        unsafe { out.set_len(len) };
        Ok(out)
    }

    /// Builds an array from raw row-major bytes of `dtype`.
    pub(crate) fn from_bytes(bytes: &[u8], shape: &[usize], dtype: DType) -> Result<Array> {
        let shape32 = dims_to_i32(shape, "Array::from_bytes")?;
        Array::wrap(
            bridge::array_from_bytes(bytes, &shape32, dtype.into())?,
            Arc::from([]),
        )
    }

    /// Evaluates and copies into an owned `ndarray::ArrayD`. Feature `ndarray`.
    #[cfg(feature = "ndarray")]
    pub fn to_ndarray<T: Element>(&self) -> Result<ArrayD<T>> {
        let v = self.to_vec::<T>()?;
        ArrayD::from_shape_vec(IxDyn(&self.shape()), v)
            .map_err(|e| Error::InvalidArgument(format!("Array::to_ndarray: {e}")))
    }

    /// The single element of a 0-d or 1-element array.
    pub fn item<T: Element>(&self) -> Result<T> {
        let v = self.to_vec::<T>()?;
        match v.as_slice() {
            [x] => Ok(*x),
            _ => Err(Error::InvalidArgument(format!(
                "Array::item: the array has {} elements, not 1",
                v.len()
            ))),
        }
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Array({}, {:?})", self.dtype(), self.shape())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_shares_one_mlx_array() {
        let a = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
        let b = a.clone();
        assert_eq!(a.id(), b.id());
        assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn bool_reads_map_every_byte_to_a_valid_bool() {
        // Bytes no `bool` may hold, as an unwritten output can.
        let a = Array::from_bytes(&[0, 1, 2, 0x80, 0xff], &[5], DType::Bool).unwrap();
        let v = a.to_vec::<bool>().unwrap();
        assert_eq!(v, vec![false, true, true, true, true]);
        // Each is a real `bool`: comparisons and bytes agree.
        assert!(v[1..].iter().all(|&b| b as u8 == 1));
        assert_eq!(a.item::<bool>().ok(), None);
        let one = Array::from_bytes(&[7], &[], DType::Bool).unwrap();
        assert!(one.item::<bool>().unwrap());
    }

    #[test]
    fn wrong_element_type_is_an_error() {
        let a = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
        let e = a.to_vec::<f32>().unwrap_err().to_string();
        assert!(e.contains("holds i32"), "{e}");
        assert!(Array::from_slice(&[1.0f32; 5], &[2, 2]).is_err());
    }
}
