//! Round trips between Rust data and MLX arrays, for every dtype.

use half::{bf16, f16};
#[cfg(feature = "ndarray")]
use ndarray::{Array2, Array3, ArrayD, IxDyn};
use triton_metal::{mlx, Array, DType, Element};

fn round_trip<T: Element + PartialEq>(values: Vec<T>) {
    let n = values.len();
    assert_eq!(n % 6, 0);
    let a = Array::from_slice(&values, &[n / 6, 6]).unwrap();
    assert_eq!(a.dtype(), T::DTYPE);
    assert_eq!(a.shape(), vec![n / 6, 6]);
    assert_eq!(a.strides(), vec![6, 1]);
    assert_eq!(a.to_vec::<T>().unwrap(), values);

    // An MLX transpose is a strided view; reading it gives logical order.
    let mt = mlx::transpose(&a, None).unwrap();
    mt.eval().unwrap();
    assert_eq!(mt.strides(), vec![1, 6]);
    let transposed: Vec<T> = (0..6)
        .flat_map(|j| (0..n / 6).map(move |i| i * 6 + j))
        .map(|k| values[k])
        .collect();
    assert_eq!(mt.to_vec::<T>().unwrap(), transposed);

    #[cfg(feature = "ndarray")]
    ndarray_round_trip(&a, values);
}

/// `values` (shape `[n / 6, 6]`, also held by `a`) through ndarray: contiguous, transposed
/// view and sliced view.
#[cfg(feature = "ndarray")]
fn ndarray_round_trip<T: Element + PartialEq>(a: &Array, values: Vec<T>) {
    let n = values.len();
    let nd = Array2::from_shape_vec((n / 6, 6), values).unwrap();
    let b = Array::from_ndarray(&nd).unwrap();
    assert_eq!(b.to_ndarray::<T>().unwrap(), nd.clone().into_dyn());
    let t = nd.t();
    let c = Array::from_ndarray(&t).unwrap();
    assert_eq!(c.shape(), vec![6, n / 6]);
    assert_eq!(c.to_ndarray::<T>().unwrap(), t.to_owned().into_dyn());
    let s = nd.slice(ndarray::s![.., 1..;2]);
    let d = Array::from_ndarray(&s).unwrap();
    assert_eq!(d.to_ndarray::<T>().unwrap(), s.to_owned().into_dyn());

    let mt = mlx::transpose(a, None).unwrap();
    assert_eq!(mt.to_ndarray::<T>().unwrap(), t.to_owned().into_dyn());
}

#[test]
fn every_dtype_round_trips() {
    let n = 24;
    round_trip((0..n).map(|i| i % 3 == 0).collect::<Vec<bool>>());
    round_trip(
        (0..n)
            .map(|i| (i as i8).wrapping_mul(37))
            .collect::<Vec<i8>>(),
    );
    round_trip((0..n).map(|i| i as i16 * -1001).collect::<Vec<i16>>());
    round_trip((0..n).map(|i| i * -100_001).collect::<Vec<i32>>());
    round_trip(
        (0..n)
            .map(|i| i as i64 * -10_000_000_001)
            .collect::<Vec<i64>>(),
    );
    round_trip((0..n).map(|i| (i * 11) as u8).collect::<Vec<u8>>());
    round_trip(
        (0..n)
            .map(|i| (i as u32).wrapping_mul(3_000_000_001u32) / 7)
            .collect::<Vec<u32>>(),
    );
    round_trip(
        (0..n)
            .map(|i| f16::from_f32(i as f32 * 0.25 - 3.0))
            .collect::<Vec<f16>>(),
    );
    round_trip(
        (0..n)
            .map(|i| bf16::from_f32(i as f32 * 0.5 - 3.0))
            .collect::<Vec<bf16>>(),
    );
    round_trip(
        (0..n)
            .map(|i| i as f32 * 1.5e-3 - 7.0)
            .collect::<Vec<f32>>(),
    );
}

#[cfg(feature = "ndarray")]
#[test]
fn ndarray_three_d_and_empty() {
    let nd = Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as i32);
    let perm = nd.view().permuted_axes([2, 0, 1]);
    let a = Array::from_ndarray(&perm).unwrap();
    assert_eq!(a.shape(), vec![4, 2, 3]);
    assert_eq!(a.to_ndarray::<i32>().unwrap(), perm.to_owned().into_dyn());

    let e = Array::from_slice::<f32>(&[], &[0, 3]).unwrap();
    let d = ArrayD::<f32>::zeros(IxDyn(&[0, 3]));
    assert_eq!(e.to_ndarray::<f32>().unwrap(), d);
}

#[test]
fn three_d_and_scalar_and_empty() {
    let a = Array::from_slice(&(0..24).collect::<Vec<i32>>(), &[2, 3, 4]).unwrap();
    assert_eq!(a.shape(), vec![2, 3, 4]);
    assert_eq!(a.strides(), vec![12, 4, 1]);
    assert_eq!(a.to_vec::<i32>().unwrap(), (0..24).collect::<Vec<i32>>());

    let s = Array::scalar(2.5f32).unwrap();
    assert_eq!(s.shape(), Vec::<usize>::new());
    assert_eq!(s.item::<f32>().unwrap(), 2.5);

    let e = Array::from_slice::<f32>(&[], &[0, 3]).unwrap();
    assert_eq!(e.size(), 0);
    assert_eq!(e.to_vec::<f32>().unwrap(), Vec::<f32>::new());
}

#[test]
fn construction_errors_are_clear() {
    let e = Array::from_slice(&[1u8, 2, 3], &[2, 2])
        .unwrap_err()
        .to_string();
    assert!(e.contains("[2, 2]") && e.contains("3 were given"), "{e}");
    let a = Array::from_slice(&[1u8, 2], &[2]).unwrap();
    let e = a.to_vec::<i32>().unwrap_err().to_string();
    assert!(e.contains("holds u8"), "{e}");
    assert!(a.item::<u8>().is_err());
    assert_eq!(a.dtype(), DType::U8);
}

#[test]
fn arrays_from_many_threads() {
    // Arrays are Send + Sync: build, share and evaluate them from several threads.
    let shared = Array::from_vec((0..1000).map(|i| i as f32).collect()).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for round in 0..20 {
                    let k = (t * 100 + round) as f32;
                    let own = mlx::full(&[1000], k as f64, DType::F32).unwrap();
                    let sum = mlx::add(&shared, &own).unwrap();
                    let total = mlx::sum(&sum, None, false).unwrap();
                    let got = total.item::<f32>().unwrap();
                    let want = 499_500.0 + 1000.0 * k;
                    assert!((got - want).abs() <= want * 1e-6, "{got} vs {want}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // A graph recorded on this thread's stream is evaluated here; once evaluated its
    // data can be read from any thread.
    let lazy = mlx::multiply(&shared, &shared).unwrap();
    let moved = mlx::add(&shared, &shared).unwrap();
    lazy.eval().unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let l = lazy.clone();
            std::thread::spawn(move || l.to_vec::<f32>().unwrap()[999])
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 998_001.0);
    }
    // MLX streams are per thread: evaluating another thread's lazy graph is an error
    // with MLX's message, never undefined behaviour.
    let err = std::thread::spawn(move || moved.eval().unwrap_err().to_string())
        .join()
        .unwrap();
    assert!(err.contains("Stream"), "{err}");
}
