//! Running one kernel on every target and comparing the outputs: [`Case`].

use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

use super::ast::{OutBuf, Tol};
use super::values::{agree, array_of_bits, bits_of_array, rust_lit};
use crate::codegen::nvrtc::Nvrtc;
use crate::codegen::ReductionLayout;
use crate::dtype::DType;
use crate::emu::LaneOrder;
use crate::error::{Error, Result};
use crate::runtime::{out, Arg, Target};
use crate::tl::JitKernel;

/// Where a kernel runs; the interpreter (`Cpu`) is the reference the others are compared
/// with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FuzzTarget {
    /// `Target::Cpu`, the reference.
    Cpu,
    /// `Target::CpuCompiled`.
    CpuCompiled,
    /// `Target::Emulated(LaneOrder::Forward)`.
    EmuForward,
    /// `Target::Emulated(LaneOrder::Reverse)`.
    EmuReverse,
    /// The CUDA text compiled by NVRTC (compile only: no GPU here).
    Nvrtc,
}

impl FuzzTarget {
    /// Every target, reference first.
    pub const ALL: [FuzzTarget; 5] = [
        FuzzTarget::Cpu,
        FuzzTarget::CpuCompiled,
        FuzzTarget::EmuForward,
        FuzzTarget::EmuReverse,
        FuzzTarget::Nvrtc,
    ];

    fn target(self) -> Option<Target> {
        match self {
            FuzzTarget::Cpu => Some(Target::Cpu),
            FuzzTarget::CpuCompiled => Some(Target::CpuCompiled),
            FuzzTarget::EmuForward => Some(Target::Emulated(LaneOrder::Forward)),
            FuzzTarget::EmuReverse => Some(Target::Emulated(LaneOrder::Reverse)),
            FuzzTarget::Nvrtc => None,
        }
    }

    /// The Rust expression naming this target.
    pub fn rust(self) -> &'static str {
        match self {
            FuzzTarget::Cpu => "FuzzTarget::Cpu",
            FuzzTarget::CpuCompiled => "FuzzTarget::CpuCompiled",
            FuzzTarget::EmuForward => "FuzzTarget::EmuForward",
            FuzzTarget::EmuReverse => "FuzzTarget::EmuReverse",
            FuzzTarget::Nvrtc => "FuzzTarget::Nvrtc",
        }
    }
}

/// NVRTC from `TRITON_METAL_NVRTC_DIR`, when set and loadable.
pub fn nvrtc() -> Option<&'static Nvrtc> {
    static N: OnceLock<Option<Nvrtc>> = OnceLock::new();
    N.get_or_init(|| {
        std::env::var_os(crate::codegen::nvrtc::NVRTC_DIR_ENV)?;
        match Nvrtc::from_env() {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("fuzz: NVRTC unavailable: {e}");
                None
            }
        }
    })
    .as_ref()
}

/// A disagreement of one target with the reference.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// An output element differs.
    Mismatch {
        /// The disagreeing target.
        target: FuzzTarget,
        /// Output parameter index.
        output: usize,
        /// Element.
        index: usize,
        /// Output dtype.
        dtype: DType,
        /// Reference bits.
        want: u64,
        /// Target bits.
        got: u64,
    },
    /// The target failed where the reference did not, or the other way round.
    Error {
        /// The target whose result differs from the reference's.
        target: FuzzTarget,
        /// What happened.
        msg: String,
    },
}

impl Finding {
    /// The target that disagreed.
    pub fn target(&self) -> FuzzTarget {
        match self {
            Finding::Mismatch { target, .. } | Finding::Error { target, .. } => *target,
        }
    }

    /// Same target and same kind (mismatch / error) — what shrinking preserves.
    pub fn same_kind(&self, other: &Finding) -> bool {
        self.target() == other.target()
            && matches!(
                (self, other),
                (Finding::Mismatch { .. }, Finding::Mismatch { .. })
                    | (Finding::Error { .. }, Finding::Error { .. })
            )
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Mismatch {
                target,
                output,
                index,
                dtype,
                want,
                got,
            } => write!(
                f,
                "{target:?}: out{output}[{index}] ({dtype}) = {} (bits {got:#x}), the interpreter \
                 gives {} (bits {want:#x})",
                rust_lit(*dtype, *got),
                rust_lit(*dtype, *want)
            ),
            Finding::Error { target, msg } => write!(f, "{target:?}: {msg}"),
        }
    }
}

/// What one run of a case on the targets gave.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Disagreements (at most a few per output).
    pub findings: Vec<Finding>,
    /// Targets that ran (and were compared).
    pub ran: Vec<FuzzTarget>,
    /// Targets that answered `Unsupported`, with the message.
    pub unsupported: Vec<(FuzzTarget, String)>,
    /// Wall-clock time each target took (compile and run).
    pub times: Vec<(FuzzTarget, std::time::Duration)>,
}

/// A kernel plus its launch (grid, inputs, outputs with fill values, i32 scalars, in
/// parameter order: inputs, outputs, scalars), run on every target and compared with the
/// interpreter: bit for bit, except output ranges given a tolerance.
pub struct Case {
    kernel: JitKernel,
    grid: usize,
    num_warps: usize,
    layout: Option<ReductionLayout>,
    inputs: Vec<(DType, Vec<u64>)>,
    outputs: Vec<OutBuf>,
    scalars: Vec<i32>,
    tols: Vec<(usize, Range<usize>, Tol)>,
    zero_sign_free: bool,
    expected: Vec<(usize, Vec<u64>)>,
}

impl Case {
    /// A case for `kernel` launched on `grid` programs (axis 0).
    pub fn new(kernel: JitKernel, grid: usize) -> Case {
        Case {
            kernel,
            grid,
            num_warps: 4,
            layout: None,
            inputs: vec![],
            outputs: vec![],
            scalars: vec![],
            tols: vec![],
            zero_sign_free: false,
            expected: vec![],
        }
    }

    /// The next input: `len` elements of `dtype`, zero except `(index, bits)` pairs.
    pub fn input(mut self, dtype: DType, len: usize, nonzero: &[(usize, u64)]) -> Case {
        let mut bits = vec![0u64; len];
        for &(i, b) in nonzero {
            if i < len {
                bits[i] = b;
            }
        }
        self.inputs.push((dtype, bits));
        self
    }

    /// The next input, all its elements as bits.
    pub fn input_bits(mut self, dtype: DType, bits: Vec<u64>) -> Case {
        self.inputs.push((dtype, bits));
        self
    }

    /// The next output: `len` elements of `dtype` holding `fill` before the launch.
    pub fn output(mut self, dtype: DType, len: usize, fill: f64) -> Case {
        self.outputs.push(OutBuf { dtype, len, fill });
        self
    }

    /// The next i32 scalar argument.
    pub fn scalar(mut self, v: i32) -> Case {
        self.scalars.push(v);
        self
    }

    /// `num_warps` of the launch.
    pub fn num_warps(mut self, n: usize) -> Case {
        self.num_warps = n;
        self
    }

    /// A reduction layout override for the launch.
    pub fn layout(mut self, l: ReductionLayout) -> Case {
        self.layout = Some(l);
        self
    }

    /// Compares elements `range` of output `out` within `tol`.
    pub fn tolerance(mut self, out: usize, range: Range<usize>, tol: Tol) -> Case {
        self.tols.push((out, range, tol));
        self
    }

    /// Treats -0 and +0 as equal in float outputs.
    pub fn zero_sign_free(mut self) -> Case {
        self.zero_sign_free = true;
        self
    }

    /// Expects output `out` to hold exactly `bits` (Triton's answer) on the interpreter, so
    /// on every target that agrees with it; the interpreter failing is a disagreement then.
    pub fn expect(mut self, out: usize, bits: Vec<u64>) -> Case {
        self.expected.push((out, bits));
        self
    }

    fn args(&self) -> Result<Vec<Arg>> {
        let mut args = Vec::new();
        for (d, bits) in &self.inputs {
            args.push(Arg::Array(array_of_bits(*d, bits)?));
        }
        for o in &self.outputs {
            args.push(out(&[o.len], o.dtype).fill(o.fill));
        }
        for &s in &self.scalars {
            args.push(s.into());
        }
        Ok(args)
    }

    fn launch_on(&self, t: Target) -> Result<Vec<Vec<u64>>> {
        let mut l = self
            .kernel
            .launch()
            .grid([self.grid])
            .args(self.args()?)
            .num_warps(self.num_warps)
            .target(t);
        if let Some(lay) = self.layout {
            l = l.reduction_layout(lay);
        }
        let outs = l.run()?;
        outs.iter().map(bits_of_array).collect()
    }

    /// The buffers the Metal launch of this case binds (see [`crate::emu::MAX_BUFFERS`]),
    /// counted on the program the emulated target would run.
    pub fn metal_buffers(&self) -> Result<usize> {
        let mut l = self
            .kernel
            .launch()
            .grid([self.grid])
            .args(self.args()?)
            .num_warps(self.num_warps)
            .target(Target::Emulated(LaneOrder::Forward));
        if let Some(lay) = self.layout {
            l = l.reduction_layout(lay);
        }
        Ok(l.emulated()?.buffers())
    }

    fn nvrtc_compile(&self) -> Option<Result<()>> {
        let n = nvrtc()?;
        let run = || -> Result<()> {
            let mut l = self
                .kernel
                .launch()
                .grid([self.grid])
                .args(self.args()?)
                .num_warps(self.num_warps);
            if let Some(lay) = self.layout {
                l = l.reduction_layout(lay);
            }
            let p = l.cuda()?;
            n.compile(
                &format!("{}.cu", p.name),
                &p.standalone(),
                &p.nvrtc_arch("compute_90"),
            )?;
            Ok(())
        };
        Some(run())
    }

    fn tol_at(&self, out: usize, i: usize) -> u32 {
        for (o, r, t) in &self.tols {
            if *o == out && r.contains(&i) {
                if let Tol::Ulps(u) = t {
                    return *u;
                }
            }
        }
        0
    }

    /// Runs on the interpreter and each of `targets`, comparing each with the interpreter.
    pub fn run(&self, targets: &[FuzzTarget]) -> Outcome {
        let mut o = Outcome::default();
        let start = std::time::Instant::now();
        let reference = self.launch_on(Target::Cpu);
        o.times.push((FuzzTarget::Cpu, start.elapsed()));
        o.ran.push(FuzzTarget::Cpu);
        if let (Err(e), false) = (&reference, self.expected.is_empty()) {
            o.findings.push(Finding::Error {
                target: FuzzTarget::Cpu,
                msg: format!("expected outputs, the interpreter fails: {e}"),
            });
        }
        if let Ok(outs) = &reference {
            for (k, want) in &self.expected {
                let d = self.outputs[*k].dtype;
                let got = &outs[*k];
                if let Some(i) = (0..want.len().max(got.len())).find(|&i| {
                    want.get(i)
                        .zip(got.get(i))
                        .is_none_or(|(a, b)| !agree(d, *a, *b, 0, false))
                }) {
                    let show = |v: Option<&u64>| v.map_or("nothing".into(), |b| rust_lit(d, *b));
                    o.findings.push(Finding::Error {
                        target: FuzzTarget::Cpu,
                        msg: format!(
                            "out{k}[{i}] ({d}) = {}, expected {}",
                            show(got.get(i)),
                            show(want.get(i))
                        ),
                    });
                }
            }
        }
        for &t in targets {
            if t == FuzzTarget::Cpu {
                continue;
            }
            let start = std::time::Instant::now();
            self.run_one(t, &reference, &mut o);
            o.times.push((t, start.elapsed()));
        }
        o
    }

    fn run_one(&self, t: FuzzTarget, reference: &Result<Vec<Vec<u64>>>, o: &mut Outcome) {
        {
            let Some(target) = t.target() else {
                match self.nvrtc_compile() {
                    None => {}
                    Some(Ok(())) => o.ran.push(t),
                    Some(Err(Error::Unsupported(m))) => o.unsupported.push((t, m)),
                    Some(Err(e)) => {
                        o.ran.push(t);
                        o.findings.push(Finding::Error {
                            target: t,
                            msg: format!("NVRTC: {e}"),
                        })
                    }
                }
                return;
            };
            let got = self.launch_on(target);
            if let Err(Error::Unsupported(m)) = &got {
                o.unsupported.push((t, m.clone()));
                return;
            }
            // Metal's buffer limit, which a batch of many outputs with different fills can
            // pass (each fill MLX's one init value cannot carry costs two buffers): the
            // launch refuses it as designed, like an unsupported dtype.
            if let Err(e) = &got {
                let m = e.to_string();
                if m.contains("Metal binds at most 31 buffers") {
                    o.unsupported.push((t, m));
                    return;
                }
            }
            o.ran.push(t);
            match (reference, &got) {
                (Ok(want), Ok(got)) => {
                    let mut per_target = 0;
                    for (k, (w, g)) in want.iter().zip(got).enumerate() {
                        let d = self.outputs[k].dtype;
                        for (i, (&a, &b)) in w.iter().zip(g).enumerate() {
                            if !agree(d, a, b, self.tol_at(k, i), self.zero_sign_free) {
                                per_target += 1;
                                if per_target <= 3 {
                                    o.findings.push(Finding::Mismatch {
                                        target: t,
                                        output: k,
                                        index: i,
                                        dtype: d,
                                        want: a,
                                        got: b,
                                    });
                                }
                            }
                        }
                    }
                }
                (Err(_), Err(_)) => {}
                (Ok(_), Err(e)) => o.findings.push(Finding::Error {
                    target: t,
                    msg: e.to_string(),
                }),
                (Err(e), Ok(_)) => o.findings.push(Finding::Error {
                    target: t,
                    msg: format!("the interpreter fails ({e}), this target does not"),
                }),
            }
        }
    }

    /// Runs on every target and panics, listing the disagreements, if any target differs
    /// from the interpreter.
    pub fn assert_agree(&self) {
        let o = self.run(&FuzzTarget::ALL);
        if !o.findings.is_empty() {
            let list: Vec<String> = o.findings.iter().map(|f| f.to_string()).collect();
            panic!(
                "kernel `{}`: targets disagree:\n  {}",
                self.kernel.name(),
                list.join("\n  ")
            );
        }
    }
}
