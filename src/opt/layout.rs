//! Memory-layout flags and roofline bounds, derived from a [`HardwareProfile`].
//!
//! [`MemoryLayout`] keeps the seed backend's flag values (DEFAULT=0, ROW_MAJOR=1,
//! COLUMN_MAJOR=2, TILED=4, COALESCED=8) so `layout & COALESCED == COALESCED` reads as it did
//! there. The op-graph planner (`crate::graph::plan_layout`) picks them per op.

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign};
use std::str::FromStr;

use serde::Serialize;

use super::hardware::HardwareProfile;
use crate::error::{Error, Result};

/// Memory-layout flags; combine with `|`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MemoryLayout(u32);

impl MemoryLayout {
    /// No particular layout: flat, contiguous.
    pub const DEFAULT: MemoryLayout = MemoryLayout(0);
    /// Rows are contiguous; threads walk a row.
    pub const ROW_MAJOR: MemoryLayout = MemoryLayout(1);
    /// Columns are contiguous (transposes, column reductions' output side).
    pub const COLUMN_MAJOR: MemoryLayout = MemoryLayout(2);
    /// Blocked tiles staged through threadgroup memory (matmul, conv).
    pub const TILED: MemoryLayout = MemoryLayout(4);
    /// Reduction layout: consecutive threads read consecutive elements, reduced per
    /// thread, then per SIMD-group, then per threadgroup (and across threadgroups).
    pub const COALESCED: MemoryLayout = MemoryLayout(8);

    const NAMED: [(&'static str, MemoryLayout); 4] = [
        ("ROW_MAJOR", MemoryLayout::ROW_MAJOR),
        ("COLUMN_MAJOR", MemoryLayout::COLUMN_MAJOR),
        ("TILED", MemoryLayout::TILED),
        ("COALESCED", MemoryLayout::COALESCED),
    ];

    /// The flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Flags from bits; `None` if unknown bits are set.
    pub fn from_bits(bits: u32) -> Option<MemoryLayout> {
        (bits & !0xF == 0).then_some(MemoryLayout(bits))
    }

    /// True when every flag of `other` is set (`DEFAULT` is contained in everything).
    pub fn contains(self, other: MemoryLayout) -> bool {
        self.0 & other.0 == other.0
    }

    /// The layouts a user can pick by name (DEFAULT and the four flags).
    pub fn all_named() -> [MemoryLayout; 5] {
        [
            MemoryLayout::DEFAULT,
            MemoryLayout::ROW_MAJOR,
            MemoryLayout::COLUMN_MAJOR,
            MemoryLayout::TILED,
            MemoryLayout::COALESCED,
        ]
    }
}

impl BitOr for MemoryLayout {
    type Output = MemoryLayout;
    fn bitor(self, rhs: MemoryLayout) -> MemoryLayout {
        MemoryLayout(self.0 | rhs.0)
    }
}

impl BitOrAssign for MemoryLayout {
    fn bitor_assign(&mut self, rhs: MemoryLayout) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for MemoryLayout {
    type Output = MemoryLayout;
    fn bitand(self, rhs: MemoryLayout) -> MemoryLayout {
        MemoryLayout(self.0 & rhs.0)
    }
}

impl fmt::Display for MemoryLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("DEFAULT");
        }
        let names: Vec<&str> = MemoryLayout::NAMED
            .iter()
            .filter(|(_, l)| self.contains(*l))
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&names.join("|"))
    }
}

impl FromStr for MemoryLayout {
    type Err = Error;

    /// Parses `COALESCED`, `row_major|tiled`, `ROW_MAJOR,TILED` or the numeric value `8`.
    fn from_str(s: &str) -> Result<MemoryLayout> {
        let t = s.trim();
        if let Ok(bits) = t.parse::<u32>() {
            return MemoryLayout::from_bits(bits).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "memory layout {bits}: unknown bits (valid: 0..=15)"
                ))
            });
        }
        let mut out = MemoryLayout::DEFAULT;
        for part in t.split(['|', '+']) {
            let p = part.trim().to_ascii_uppercase().replace('-', "_");
            if p == "DEFAULT" {
                continue;
            }
            let l = MemoryLayout::NAMED
                .iter()
                .find(|(n, _)| *n == p)
                .map(|(_, l)| *l)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "unknown memory layout `{}`; valid: DEFAULT, ROW_MAJOR, COLUMN_MAJOR, TILED, COALESCED",
                        part.trim()
                    ))
                })?;
            out |= l;
        }
        Ok(out)
    }
}

impl Serialize for MemoryLayout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What limits an op on a chip, from the profile's peak figures: a lower bound on its
/// time, not a measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Roofline {
    /// Bytes the op must move at least (operands read once, result written once).
    pub bytes: u64,
    /// Floating-point (or integer) operations.
    pub flops: u64,
    /// `flops / bytes`.
    pub intensity: f64,
    /// `memory` or `compute`: which peak the op reaches first; `None` when the profile
    /// has no peak figures (the CPU profile).
    pub limit: Option<&'static str>,
    /// `max(bytes / bandwidth, flops / peak)` in microseconds, when known.
    pub min_time_us: Option<f64>,
}

impl Roofline {
    /// The bound for `bytes` and `flops` on `hw`.
    pub fn new(bytes: u64, flops: u64, hw: &HardwareProfile) -> Roofline {
        let intensity = if bytes == 0 {
            0.0
        } else {
            flops as f64 / bytes as f64
        };
        let (limit, min_time_us) = match (hw.memory_bandwidth_gbps, hw.fp32_tflops) {
            (Some(bw), Some(tf)) => {
                let mem = bytes as f64 / (bw * 1e9) * 1e6;
                let cmp = flops as f64 / (tf * 1e12) * 1e6;
                (
                    Some(if cmp > mem { "compute" } else { "memory" }),
                    Some(mem.max(cmp)),
                )
            }
            _ => (None, None),
        };
        Roofline {
            bytes,
            flops,
            intensity,
            limit,
            min_time_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_print_and_parse() {
        assert_eq!(MemoryLayout::COALESCED.bits(), 8);
        assert_eq!(MemoryLayout::TILED.bits(), 4);
        let l = MemoryLayout::ROW_MAJOR | MemoryLayout::COALESCED;
        assert_eq!(l.bits(), 9);
        assert_eq!(l.to_string(), "ROW_MAJOR|COALESCED");
        assert_eq!("row_major|coalesced".parse::<MemoryLayout>().unwrap(), l);
        assert_eq!("9".parse::<MemoryLayout>().unwrap(), l);
        assert_eq!(
            "DEFAULT".parse::<MemoryLayout>().unwrap(),
            MemoryLayout::DEFAULT
        );
        assert!(l.contains(MemoryLayout::COALESCED) && !l.contains(MemoryLayout::TILED));
        let e = "SPIRAL".parse::<MemoryLayout>().unwrap_err().to_string();
        assert!(e.contains("unknown memory layout `SPIRAL`"), "{e}");
        assert!("16".parse::<MemoryLayout>().is_err());
    }
}
