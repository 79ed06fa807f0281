//! Hardware profiles: the per-chip numbers every planning decision is derived from.
//!
//! Layout plans, tile sizes, vector widths and the threadgroup-memory budget come from a
//! [`HardwareProfile`], never from constants scattered in codegen. The profile of the
//! machine is found by [`HardwareProfile::detect`]; `TRITON_METAL_HW=<name>` overrides it
//! so any chip can be planned for on any host (e.g. an M3 Max plan on a Linux CI box).
//!
//! Figures: Apple GPU cores, FP32 TFLOPS (estimates) and bandwidth are the DESIGN.md table;
//! NVIDIA figures are the vendors' published numbers for A100-SXM4-80GB (sm_80) and
//! H100-SXM5-80GB (sm_90). The CPU profile has no fixed throughput figures: they depend on
//! the host, so they are `None` rather than a guess.

use std::fmt;

use serde::Serialize;

use crate::device::{Backend, HardwareInfo};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// The environment variable that overrides hardware detection.
pub const HW_ENV_VAR: &str = "TRITON_METAL_HW";

/// Every chip a profile exists for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Chip {
    /// Apple M1.
    M1,
    /// Apple M1 Pro.
    M1Pro,
    /// Apple M1 Max.
    M1Max,
    /// Apple M2.
    M2,
    /// Apple M2 Pro.
    M2Pro,
    /// Apple M2 Max.
    M2Max,
    /// Apple M3.
    M3,
    /// Apple M3 Pro.
    M3Pro,
    /// Apple M3 Max.
    M3Max,
    /// Apple M4.
    M4,
    /// Apple M4 Pro.
    M4Pro,
    /// Apple M4 Max.
    M4Max,
    /// An Apple GPU whose generation is unknown: M1-level capabilities are assumed.
    AppleGeneric,
    /// NVIDIA Ampere (A100), compute capability 8.0.
    Sm80,
    /// NVIDIA Hopper (H100), compute capability 9.0.
    Sm90,
    /// No GPU: kernels run on the CPU executor.
    Cpu,
}

impl Chip {
    /// Every chip, in a fixed order.
    pub const ALL: [Chip; 16] = [
        Chip::M1,
        Chip::M1Pro,
        Chip::M1Max,
        Chip::M2,
        Chip::M2Pro,
        Chip::M2Max,
        Chip::M3,
        Chip::M3Pro,
        Chip::M3Max,
        Chip::M4,
        Chip::M4Pro,
        Chip::M4Max,
        Chip::AppleGeneric,
        Chip::Sm80,
        Chip::Sm90,
        Chip::Cpu,
    ];

    /// The name accepted by `TRITON_METAL_HW` (`m3-max`, `sm90`, `cpu`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Chip::M1 => "m1",
            Chip::M1Pro => "m1-pro",
            Chip::M1Max => "m1-max",
            Chip::M2 => "m2",
            Chip::M2Pro => "m2-pro",
            Chip::M2Max => "m2-max",
            Chip::M3 => "m3",
            Chip::M3Pro => "m3-pro",
            Chip::M3Max => "m3-max",
            Chip::M4 => "m4",
            Chip::M4Pro => "m4-pro",
            Chip::M4Max => "m4-max",
            Chip::AppleGeneric => "apple",
            Chip::Sm80 => "sm80",
            Chip::Sm90 => "sm90",
            Chip::Cpu => "cpu",
        }
    }

    /// A readable name (`Apple M3 Max`, `NVIDIA sm_90 (H100)`).
    pub fn display_name(self) -> &'static str {
        match self {
            Chip::M1 => "Apple M1",
            Chip::M1Pro => "Apple M1 Pro",
            Chip::M1Max => "Apple M1 Max",
            Chip::M2 => "Apple M2",
            Chip::M2Pro => "Apple M2 Pro",
            Chip::M2Max => "Apple M2 Max",
            Chip::M3 => "Apple M3",
            Chip::M3Pro => "Apple M3 Pro",
            Chip::M3Max => "Apple M3 Max",
            Chip::M4 => "Apple M4",
            Chip::M4Pro => "Apple M4 Pro",
            Chip::M4Max => "Apple M4 Max",
            Chip::AppleGeneric => "Apple GPU (generation unknown)",
            Chip::Sm80 => "NVIDIA sm_80 (A100)",
            Chip::Sm90 => "NVIDIA sm_90 (H100)",
            Chip::Cpu => "CPU executor",
        }
    }

    /// Parses a chip name: the canonical names plus common spellings (`M3 Max`, `m3_max`,
    /// `sm_90`, `h100`, `a100`, `generic`). Unknown names give an error listing the valid ones.
    pub fn parse(name: &str) -> Result<Chip> {
        let n: String = name
            .trim()
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c == '_' || c == ' ' { '-' } else { c })
            .collect();
        let alias = match n.as_str() {
            "sm-80" | "sm8.0" | "a100" | "ampere" => Some(Chip::Sm80),
            "sm-90" | "sm9.0" | "h100" | "h200" | "hopper" => Some(Chip::Sm90),
            "generic" | "apple-generic" | "metal" => Some(Chip::AppleGeneric),
            _ => None,
        };
        alias
            .or_else(|| Chip::ALL.into_iter().find(|c| c.name() == n))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown hardware `{name}`; valid names: {}",
                    Chip::ALL.map(Chip::name).join(", ")
                ))
            })
    }

    /// The Apple chip of generation `gen` (1..=4) and tier (`g` base, `s` Pro, `c`/`d`
    /// Max/Ultra, the last letter of Metal's architecture string).
    fn apple(gen: u32, tier: Tier) -> Option<Chip> {
        use Chip::*;
        let row = match gen {
            1 => [M1, M1Pro, M1Max],
            2 => [M2, M2Pro, M2Max],
            3 => [M3, M3Pro, M3Max],
            4 => [M4, M4Pro, M4Max],
            _ => return None,
        };
        Some(row[tier as usize])
    }
}

impl fmt::Display for Chip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy)]
enum Tier {
    Base = 0,
    Pro = 1,
    Max = 2,
}

/// A matmul tile: the block of C one threadgroup computes, and the K step per iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TileShape {
    /// Rows of C per threadgroup (`BLOCK_M`).
    pub m: u32,
    /// Columns of C per threadgroup (`BLOCK_N`).
    pub n: u32,
    /// K per main-loop step (`BLOCK_K`).
    pub k: u32,
}

impl TileShape {
    /// Threadgroup memory one stage of A and B tiles of `dtype` needs.
    pub fn stage_bytes(&self, dtype: DType) -> u64 {
        (self.m as u64 * self.k as u64 + self.k as u64 * self.n as u64) * dtype.size_bytes() as u64
    }
}

impl fmt::Display for TileShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.m, self.n, self.k)
    }
}

/// What a planner needs to know about one device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HardwareProfile {
    /// Which chip.
    pub chip: Chip,
    /// Backend kernels are generated for.
    #[serde(serialize_with = "ser_backend")]
    pub backend: Backend,
    /// Apple GPU generation (1..=4 for M1..M4), when Apple.
    pub apple_generation: Option<u32>,
    /// GPU cores (Apple), SMs (NVIDIA) or CPU cores seen at detection (CPU).
    pub compute_units: u32,
    /// Threads in a SIMD-group / warp (lanes of a CPU vector register for the CPU).
    pub simd_width: u32,
    /// Largest threadgroup (block) the hardware allows.
    pub max_threads_per_threadgroup: u32,
    /// Threadgroup (shared) memory one threadgroup may use, in bytes.
    pub threadgroup_memory_bytes: u32,
    /// Peak DRAM bandwidth in GB/s (None where it depends on the host).
    pub memory_bandwidth_gbps: Option<f64>,
    /// Peak FP32 throughput in TFLOP/s (None where it depends on the host).
    pub fp32_tflops: Option<f64>,
    /// Hardware matrix tiles: `simdgroup_matrix` (Apple7+) or tensor cores (NVIDIA).
    pub simdgroup_matrix: bool,
    /// Native bfloat16 arithmetic and storage (Metal needs MSL 3.1).
    pub bfloat: bool,
    /// Metal's dynamic caching (M3 and later): registers and threadgroup memory are
    /// allocated on demand, so occupancy suffers less from large threadgroups.
    pub dynamic_caching: bool,
    /// Bytes one thread should move per vector load or store (16: `float4` / 128-bit LDG).
    pub vector_bytes: u32,
    /// Default matmul tile for 16-bit inputs.
    pub matmul_tile: TileShape,
    /// Software pipelining depth the matmul tile is budgeted for.
    pub pipeline_stages: u32,
    /// Threads per threadgroup used for bandwidth-bound kernels (elementwise, reductions).
    pub default_threads: u32,
}

fn ser_backend<S: serde::Serializer>(b: &Backend, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(b)
}

/// The DESIGN.md row for an Apple chip: (GPU cores, FP32 TFLOPS, bandwidth GB/s).
fn apple_figures(chip: Chip) -> (u32, f64, f64) {
    match chip {
        Chip::M1 => (8, 2.6, 68.0),
        Chip::M1Pro => (16, 5.3, 200.0),
        Chip::M1Max => (32, 10.6, 400.0),
        Chip::M2 => (10, 3.6, 100.0),
        Chip::M2Pro => (19, 6.8, 200.0),
        Chip::M2Max => (38, 13.6, 400.0),
        Chip::M3 => (10, 3.6, 100.0),
        Chip::M3Pro => (18, 6.4, 150.0),
        Chip::M3Max => (40, 14.3, 400.0),
        Chip::M4 => (10, 3.8, 120.0),
        Chip::M4Pro => (20, 8.0, 273.0),
        Chip::M4Max => (40, 17.0, 546.0),
        // Unknown Apple GPU: the smallest M1's figures, so plans never over-commit.
        _ => (8, 2.6, 68.0),
    }
}

fn apple_generation_of_chip(chip: Chip) -> Option<u32> {
    match chip {
        Chip::M1 | Chip::M1Pro | Chip::M1Max => Some(1),
        Chip::M2 | Chip::M2Pro | Chip::M2Max => Some(2),
        Chip::M3 | Chip::M3Pro | Chip::M3Max => Some(3),
        Chip::M4 | Chip::M4Pro | Chip::M4Max => Some(4),
        _ => None,
    }
}

impl HardwareProfile {
    /// The profile of `chip`.
    pub fn of(chip: Chip) -> HardwareProfile {
        match chip {
            Chip::Sm80 => HardwareProfile {
                chip,
                backend: Backend::Cuda,
                apple_generation: None,
                compute_units: 108,
                simd_width: 32,
                max_threads_per_threadgroup: 1024,
                // Largest opt-in dynamic shared memory per block on A100.
                threadgroup_memory_bytes: 163 * 1024,
                memory_bandwidth_gbps: Some(2039.0),
                fp32_tflops: Some(19.5),
                simdgroup_matrix: true,
                bfloat: true,
                dynamic_caching: false,
                vector_bytes: 16,
                matmul_tile: TileShape {
                    m: 128,
                    n: 128,
                    k: 32,
                },
                pipeline_stages: 3,
                default_threads: 256,
            },
            Chip::Sm90 => HardwareProfile {
                chip,
                backend: Backend::Cuda,
                apple_generation: None,
                compute_units: 132,
                simd_width: 32,
                max_threads_per_threadgroup: 1024,
                threadgroup_memory_bytes: 227 * 1024,
                memory_bandwidth_gbps: Some(3350.0),
                fp32_tflops: Some(67.0),
                simdgroup_matrix: true,
                bfloat: true,
                dynamic_caching: false,
                vector_bytes: 16,
                matmul_tile: TileShape {
                    m: 128,
                    n: 256,
                    k: 64,
                },
                pipeline_stages: 3,
                default_threads: 256,
            },
            Chip::Cpu => HardwareProfile {
                chip,
                backend: Backend::Cpu,
                apple_generation: None,
                compute_units: std::thread::available_parallelism()
                    .map(|n| n.get() as u32)
                    .unwrap_or(1),
                // 256-bit vector registers hold 8 fp32 lanes (AVX2, two NEON registers).
                simd_width: 8,
                // The executor runs Metal-shaped kernels, so it keeps Metal's limits: a plan
                // made for the CPU is also a valid Metal plan.
                max_threads_per_threadgroup: 1024,
                threadgroup_memory_bytes: 32 * 1024,
                memory_bandwidth_gbps: None,
                fp32_tflops: None,
                simdgroup_matrix: false,
                bfloat: true,
                dynamic_caching: false,
                vector_bytes: 32,
                matmul_tile: TileShape {
                    m: 32,
                    n: 32,
                    k: 32,
                },
                pipeline_stages: 1,
                default_threads: 256,
            },
            apple => {
                let (cores, tflops, bw) = apple_figures(apple);
                let generation = apple_generation_of_chip(apple);
                HardwareProfile {
                    chip: apple,
                    backend: Backend::Metal,
                    apple_generation: generation,
                    compute_units: cores,
                    simd_width: 32,
                    max_threads_per_threadgroup: 1024,
                    threadgroup_memory_bytes: 32 * 1024,
                    memory_bandwidth_gbps: Some(bw),
                    fp32_tflops: Some(tflops),
                    // simdgroup_matrix is Apple7+ (every M-series GPU).
                    simdgroup_matrix: true,
                    // bfloat is an MSL 3.1 type on Apple6+; a generic profile does not assume it.
                    bfloat: generation.is_some(),
                    dynamic_caching: generation.is_some_and(|g| g >= 3),
                    vector_bytes: 16,
                    // MLX's steel GEMM shape: 4 simdgroups (2x2), each 32x32 of C in 8x8
                    // simdgroup_matrix fragments; two stages of A and B fit in 32 KB.
                    matmul_tile: TileShape {
                        m: 64,
                        n: 64,
                        k: 16,
                    },
                    pipeline_stages: 2,
                    default_threads: 256,
                }
            }
        }
    }

    /// The profile named `name` (see [`Chip::parse`]).
    pub fn named(name: &str) -> Result<HardwareProfile> {
        Chip::parse(name).map(HardwareProfile::of)
    }

    /// Every profile, in [`Chip::ALL`] order.
    pub fn all() -> Vec<HardwareProfile> {
        Chip::ALL.into_iter().map(HardwareProfile::of).collect()
    }

    /// The profile to plan for: `TRITON_METAL_HW` when set (an unknown value is an error
    /// listing the valid names), else the default MLX device.
    pub fn detect() -> Result<HardwareProfile> {
        match crate::settings::var(HW_ENV_VAR) {
            Some(v) if !v.trim().is_empty() => HardwareProfile::named(&v).map_err(|e| match e {
                Error::InvalidArgument(m) => Error::InvalidArgument(format!("{HW_ENV_VAR}: {m}")),
                other => other,
            }),
            _ => Ok(HardwareProfile::from_info(&HardwareInfo::detect()?)),
        }
    }

    /// The profile for a device MLX described.
    pub fn from_info(info: &HardwareInfo) -> HardwareProfile {
        HardwareProfile::of(chip_of_info(info))
    }

    /// Whether kernels for this profile are CUDA (NVIDIA) kernels.
    pub fn is_cuda(&self) -> bool {
        self.backend == Backend::Cuda
    }

    /// Elements of `dtype` one vector load moves (at least 1).
    pub fn vector_width(&self, dtype: DType) -> u32 {
        (self.vector_bytes / dtype.size_bytes() as u32).max(1)
    }

    /// SIMD-groups (warps) in a threadgroup of `threads` threads.
    pub fn simdgroups(&self, threads: u32) -> u32 {
        threads.div_ceil(self.simd_width).max(1)
    }

    /// The matmul tile for inputs of `dtype`: the profile's tile, with K halved until the
    /// pipelined A and B stages fit the threadgroup-memory budget (so 32-bit inputs get a
    /// shorter K step than 16-bit ones where memory is tight).
    pub fn matmul_tile_for(&self, dtype: DType) -> TileShape {
        let mut t = self.matmul_tile;
        let budget = self.threadgroup_memory_bytes as u64;
        while t.k > 8 && t.stage_bytes(dtype) * self.pipeline_stages as u64 > budget {
            t.k /= 2;
        }
        t
    }
}

impl fmt::Display for HardwareProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.chip.display_name(), self.chip.name())
    }
}

fn chip_of_info(info: &HardwareInfo) -> Chip {
    match info.backend {
        Backend::Cpu => Chip::Cpu,
        Backend::Cuda => {
            let n = info.name.to_ascii_uppercase();
            if ["H100", "H200", "H800", "GH200"]
                .iter()
                .any(|k| n.contains(k))
            {
                Chip::Sm90
            } else {
                // Ampere is the oldest architecture MLX's CUDA backend targets by default.
                Chip::Sm80
            }
        }
        Backend::Metal => {
            let from_name = apple_chip_from_name(&info.name);
            let from_arch = info.architecture.as_deref().and_then(|arch| {
                let tier = match arch.chars().last() {
                    Some('s') => Tier::Pro,
                    Some('c') | Some('d') => Tier::Max,
                    _ => Tier::Base,
                };
                Chip::apple(info.apple_generation?, tier)
            });
            from_name.or(from_arch).unwrap_or(Chip::AppleGeneric)
        }
    }
}

/// `Apple M3 Max` -> M3Max; Ultra parts are two Max dies and are planned as a Max (the
/// per-threadgroup limits are the same; DESIGN.md has no Ultra figures).
fn apple_chip_from_name(name: &str) -> Option<Chip> {
    let pos = name.find(" M")? + 2;
    let rest = &name[pos..];
    let gen: u32 = rest.chars().next()?.to_digit(10)?;
    let tail = rest[1..].trim().to_ascii_lowercase();
    let tier = if tail.starts_with("pro") {
        Tier::Pro
    } else if tail.starts_with("max") || tail.starts_with("ultra") {
        Tier::Max
    } else {
        Tier::Base
    };
    Chip::apple(gen, tier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn metal_info(name: &str, arch: &str) -> HardwareInfo {
        HardwareInfo {
            backend: Backend::Metal,
            name: name.into(),
            architecture: Some(arch.into()),
            apple_generation: crate::device::apple_generation_of(arch),
            raw: BTreeMap::new(),
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_valid_ones() {
        for c in Chip::ALL {
            assert_eq!(Chip::parse(c.name()).unwrap(), c);
        }
        assert_eq!(Chip::parse("M3 Max").unwrap(), Chip::M3Max);
        assert_eq!(Chip::parse("sm_90").unwrap(), Chip::Sm90);
        let e = Chip::parse("m9").unwrap_err().to_string();
        assert!(
            e.contains("unknown hardware `m9`") && e.contains("m3-max, "),
            "{e}"
        );
    }

    #[test]
    fn design_table_figures() {
        let m4max = HardwareProfile::of(Chip::M4Max);
        assert_eq!(m4max.memory_bandwidth_gbps, Some(546.0));
        assert_eq!(m4max.compute_units, 40);
        assert_eq!(HardwareProfile::of(Chip::M1).fp32_tflops, Some(2.6));
        assert!(HardwareProfile::of(Chip::M3).dynamic_caching);
        assert!(!HardwareProfile::of(Chip::M2Max).dynamic_caching);
        for p in HardwareProfile::all() {
            assert!(p.max_threads_per_threadgroup.is_power_of_two());
            assert_eq!(p.max_threads_per_threadgroup % p.simd_width, 0);
        }
    }

    #[test]
    fn matmul_tiles_fit_threadgroup_memory() {
        for p in HardwareProfile::all() {
            for dt in [DType::F16, DType::F32] {
                let t = p.matmul_tile_for(dt);
                assert!(
                    t.stage_bytes(dt) * p.pipeline_stages as u64
                        <= p.threadgroup_memory_bytes as u64,
                    "{} {dt}: {t}",
                    p.chip
                );
            }
        }
    }

    #[test]
    fn detection_from_mlx_descriptions() {
        let p = HardwareProfile::from_info(&metal_info("Apple M3 Max", "applegpu_g15c"));
        assert_eq!(p.chip, Chip::M3Max);
        let p = HardwareProfile::from_info(&metal_info("", "applegpu_g14s"));
        assert_eq!(p.chip, Chip::M2Pro);
        let p = HardwareProfile::from_info(&metal_info("", "applegpu_g13g"));
        assert_eq!(p.chip, Chip::M1);
        let p = HardwareProfile::from_info(&metal_info("Apple GPU", "applegpu_g99x"));
        assert_eq!(p.chip, Chip::AppleGeneric);
        let cuda = HardwareInfo {
            backend: Backend::Cuda,
            name: "NVIDIA H100 80GB HBM3".into(),
            architecture: None,
            apple_generation: None,
            raw: BTreeMap::new(),
        };
        assert_eq!(HardwareProfile::from_info(&cuda).chip, Chip::Sm90);
    }

    #[test]
    fn vector_widths_follow_dtype() {
        let p = HardwareProfile::of(Chip::M2);
        assert_eq!(p.vector_width(DType::F32), 4);
        assert_eq!(p.vector_width(DType::F16), 8);
        assert_eq!(p.vector_width(DType::F64), 2);
        assert_eq!(p.simdgroups(256), 8);
    }
}
