//! A fused Adam / AdamW optimizer step updating existing parameter and moment arrays in
//! place (`inout`), as PyTorch's `torch.optim.Adam` and `AdamW` define the step: one kernel
//! reads each parameter, gradient and the two moments once and writes parameter and
//! moments back. Several steps run back to back, each launch's results feeding the next,
//! on ragged sizes; checked against the same steps in f64 Rust.
//!
//! `cargo run --release --example adam`

use triton_metal::runtime::{cdiv, grid, inout};
use triton_metal::{jit, mlx, tl, Array, DType::F32, Error};

/// One optimizer step on `n` elements: `DECOUPLED = 1` is AdamW (weight decay scales the
/// parameter), `0` is Adam with L2 regularisation (weight decay added to the gradient).
/// `bias1 = 1 - beta1^t` and `bias2 = 1 - beta2^t` for step `t`.
#[jit]
pub fn adam_step(
    param_ptr: Ptr<F32>,
    grad_ptr: Ptr<F32>,
    m_ptr: Ptr<F32>,
    v_ptr: Ptr<F32>,
    n: i32,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    bias1: f32,
    bias2: f32,
    BLOCK: Constexpr,
    DECOUPLED: Constexpr,
) {
    let offs = tl::program_id(0) * BLOCK + tl::arange(0, BLOCK);
    let mask = offs < n;
    let mut p = tl::load(param_ptr + offs, mask = mask);
    let mut g = tl::load(grad_ptr + offs, mask = mask);
    let m = tl::load(m_ptr + offs, mask = mask);
    let v = tl::load(v_ptr + offs, mask = mask);
    if DECOUPLED == 1 {
        p = p * (1.0 - lr * weight_decay);
    } else {
        g = g + weight_decay * p;
    }
    let m = beta1 * m + (1.0 - beta1) * g;
    let v = beta2 * v + (1.0 - beta2) * g * g;
    let m_hat = m / bias1;
    let v_hat = v / bias2;
    let p = p - lr * m_hat / (tl::sqrt(v_hat) + eps);
    tl::store(param_ptr + offs, p, mask = mask);
    tl::store(m_ptr + offs, m, mask = mask);
    tl::store(v_ptr + offs, v, mask = mask);
}

/// The hyper-parameters of a run.
#[derive(Clone, Copy)]
struct Hyper {
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    decoupled: bool,
}

impl Hyper {
    /// The values the kernel receives (its scalar parameters are f32), as f64.
    fn as_f32(self) -> Hyper {
        let r = |x: f64| x as f32 as f64;
        Hyper {
            lr: r(self.lr),
            beta1: r(self.beta1),
            beta2: r(self.beta2),
            eps: r(self.eps),
            weight_decay: r(self.weight_decay),
            decoupled: self.decoupled,
        }
    }

    /// `1 - beta1^t` and `1 - beta2^t` for step `t`, rounded to f32 as the kernel gets them.
    fn bias_corrections(self, t: i32) -> (f32, f32) {
        (
            (1.0 - self.beta1.powi(t)) as f32,
            (1.0 - self.beta2.powi(t)) as f32,
        )
    }
}

/// Step `t` (from 1) of the same update in f64, from the f32 hyper-parameters the kernel
/// gets: parameters, first and second moments.
fn reference_step(h: Hyper, t: i32, p: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64]) {
    let (bias1, bias2) = h.bias_corrections(t);
    let (bias1, bias2) = (bias1 as f64, bias2 as f64);
    let h = h.as_f32();
    for i in 0..p.len() {
        let mut gi = g[i];
        if h.decoupled {
            p[i] *= 1.0 - h.lr * h.weight_decay;
        } else {
            gi += h.weight_decay * p[i];
        }
        m[i] = h.beta1 * m[i] + (1.0 - h.beta1) * gi;
        v[i] = h.beta2 * v[i] + (1.0 - h.beta2) * gi * gi;
        p[i] -= h.lr * (m[i] / bias1) / ((v[i] / bias2).sqrt() + h.eps);
    }
}

fn to_f64(a: &Array) -> triton_metal::Result<Vec<f64>> {
    Ok(a.to_vec::<f32>()?.into_iter().map(f64::from).collect())
}

/// The largest error of `got` against `want`, relative to `max(|want|, rms(want))`: an
/// element near zero (a moment whose terms cancel) is measured against the array's scale.
fn max_rel_err(got: &[f64], want: &[f64]) -> f64 {
    let floor = (want.iter().map(|w| w * w).sum::<f64>() / want.len().max(1) as f64).sqrt();
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_nan() {
                f64::INFINITY
            } else {
                (g - w).abs() / w.abs().max(floor)
            }
        })
        .fold(0.0, f64::max)
}

fn run(n: usize, h: Hyper, steps: i32, seed: u64) -> triton_metal::Result<f64> {
    let kernel = adam_step()?;
    let mut param = mlx::random::normal(&[n], F32, seed)?;
    let mut m = mlx::multiply(
        &mlx::random::normal(&[n], F32, seed + 1)?,
        &mlx::full(&[1], 0.01, F32)?,
    )?;
    let mut v = mlx::random::uniform(&[n], F32, 1.0e-4, 1.0e-2, seed + 2)?;
    let (mut rp, mut rm, mut rv) = (to_f64(&param)?, to_f64(&m)?, to_f64(&v)?);
    let first_param = param.to_vec::<f32>()?;
    let start = param.clone();
    for t in 1..=steps {
        let grad = mlx::random::normal(&[n], F32, seed + 10 + t as u64)?;
        let (bias1, bias2) = h.bias_corrections(t);
        let [p, m_next, v_next]: [Array; 3] = kernel
            .launch()
            .grid(grid(move |meta| [cdiv(n, meta["BLOCK"])]))
            .args((
                inout(&param),
                &grad,
                inout(&m),
                inout(&v),
                n as i32,
                h.lr as f32,
                h.beta1 as f32,
                h.beta2 as f32,
                h.eps as f32,
                h.weight_decay as f32,
                bias1,
                bias2,
            ))
            .constexpr("BLOCK", 1024)
            .constexpr("DECOUPLED", h.decoupled as i64)
            .run()?
            .try_into()
            .map_err(|_| Error::InvalidArgument("adam_step returns three arrays".into()))?;
        reference_step(h, t, &mut rp, &to_f64(&grad)?, &mut rm, &mut rv);
        (param, m, v) = (p, m_next, v_next);
    }
    // The arrays given to the first step are unchanged (MLX arrays are immutable).
    if start.to_vec::<f32>()? != first_param {
        return Err(Error::Runtime {
            kernel: "adam_step".into(),
            msg: "the first step's argument changed".into(),
        });
    }
    let err = [
        max_rel_err(&to_f64(&param)?, &rp),
        max_rel_err(&to_f64(&m)?, &rm),
        max_rel_err(&to_f64(&v)?, &rv),
    ]
    .into_iter()
    .fold(0.0, f64::max);
    println!(
        "{} n = {n}, {steps} steps: max relative error of parameters and moments = {err:e}",
        if h.decoupled { "AdamW" } else { "Adam " }
    );
    Ok(err)
}

fn main() -> triton_metal::Result<()> {
    let adam = Hyper {
        lr: 1.0e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1.0e-8,
        weight_decay: 1.0e-2,
        decoupled: false,
    };
    let adamw = Hyper {
        lr: 3.0e-3,
        weight_decay: 0.1,
        decoupled: true,
        ..adam
    };
    let mut worst: f64 = 0.0;
    for (n, seed) in [(1usize, 1u64), (1000, 2), (65_537, 3), (100_003, 4)] {
        worst = worst.max(run(n, adam, 3, seed)?);
        worst = worst.max(run(n, adamw, 3, seed + 100)?);
    }
    // f32 arithmetic against f64: a few roundings per step.
    if worst > 2.0e-6 {
        return Err(Error::Runtime {
            kernel: "adam_step".into(),
            msg: format!("max relative error {worst:e} exceeds 2e-6"),
        });
    }
    println!("verified: in-place Adam and AdamW steps match f64 references");
    Ok(())
}
