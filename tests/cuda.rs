//! Launching on CUDA through MLX's `fast::cuda_kernel`. On an NVIDIA GPU (a `--features
//! cuda` build with MLX's CUDA libmlx.so) the kernels run and match MLX; on any other
//! machine the launch must come back as MLX's `Err`, never an abort.

use triton_metal::runtime::{cdiv, grid, out, out_like, Target};
use triton_metal::testing::max_abs_diff;
use triton_metal::tl::{self, JitKernel};
use triton_metal::{mlx, Backend, DType::F32, DType::I32, Error, HardwareInfo};

fn on_cuda() -> bool {
    HardwareInfo::detect().is_ok_and(|h| h.backend == Backend::Cuda)
}

fn add() -> JitKernel {
    tl::jit("add_kernel", |k| {
        let (x, y, o) = (
            k.ptr(F32, "x_ptr"),
            k.ptr(F32, "y_ptr"),
            k.ptr(F32, "out_ptr"),
        );
        let n = k.scalar(I32, "n_elements");
        let block = k.constexpr("BLOCK_SIZE");
        let offs = tl::program_id(0) * block + tl::arange(0, block);
        let mask = offs.lt(n);
        tl::store(
            o + offs,
            tl::load(x + offs).mask(mask) + tl::load(y + offs).mask(mask),
        )
        .mask(mask);
    })
    .unwrap()
}

fn softmax() -> JitKernel {
    tl::jit("softmax", |k| {
        let (o, x) = (k.ptr(F32, "out_ptr"), k.ptr(F32, "in_ptr"));
        let n = k.scalar(I32, "n_cols");
        let block = k.constexpr("BLOCK");
        let row = tl::program_id(0);
        let offs = tl::arange(0, block);
        let mask = offs.lt(n);
        let v = tl::load(x + row * n + offs)
            .mask(mask)
            .other(f32::NEG_INFINITY);
        let e = (v - v.max(0)).exp();
        tl::store(o + row * n + offs, e / e.sum(0)).mask(mask);
    })
    .unwrap()
}

#[test]
fn vector_add_on_cuda_or_mlx_error() {
    let n = 100_003;
    let x = mlx::random::uniform(&[n], F32, 0.0, 1.0, 1).unwrap();
    let y = mlx::random::uniform(&[n], F32, 0.0, 1.0, 2).unwrap();
    let r = add()
        .launch()
        .grid(grid(move |m| [cdiv(n, m["BLOCK_SIZE"])]))
        .args((&x, &y, out_like(&x).fill(f64::NAN), n as i32))
        .constexpr("BLOCK_SIZE", 1024)
        .target(Target::Cuda)
        .run()
        .and_then(|o| {
            let want = mlx::add(&x, &y)?;
            max_abs_diff(&o[0], &want)
        });
    if on_cuda() {
        assert_eq!(r.unwrap(), 0.0);
        println!("ran on CUDA: identical to MLX's add");
    } else {
        let e = r.expect_err("no CUDA GPU here: MLX must refuse");
        assert!(
            matches!(e, Error::Mlx(ref m) if m.contains("cuda")),
            "{e:?}"
        );
        println!("without a CUDA GPU MLX answers: {e}");
    }
}

#[test]
fn softmax_on_cuda_or_mlx_error() {
    let (rows, cols) = (37, 1000);
    let x = mlx::random::normal(&[rows, cols], F32, 3).unwrap();
    let r = softmax()
        .launch()
        .grid([rows])
        .args((out(&[rows, cols], F32).fill(f64::NAN), &x, cols as i32))
        .constexpr("BLOCK", 1024)
        .num_warps(8)
        .target(Target::Cuda)
        .run()
        .and_then(|o| {
            let want = mlx::softmax(&x, &[1], true)?;
            max_abs_diff(&o[0], &want)
        });
    if on_cuda() {
        let e = r.unwrap();
        assert!(e < 1e-6, "{e}");
        println!("ran on CUDA: max error vs MLX's softmax {e:e}");
    } else {
        let e = r.expect_err("no CUDA GPU here: MLX must refuse");
        assert!(
            matches!(e, Error::Mlx(ref m) if m.contains("cuda")),
            "{e:?}"
        );
    }
}
