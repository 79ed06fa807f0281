//! The optimizer: hardware profiles, the integer analysis of kernel IR, and the layout plan
//! of a kernel ([`plan`]) that the printers spell. The per-op layouts of the op-graph tool
//! are planned in [`crate::graph::layout`] from the same profiles.
//!
//! ```
//! use triton_metal::opt::{HardwareProfile, MemoryLayout, Roofline};
//!
//! // An M3 Max, whatever machine this runs on.
//! let hw = HardwareProfile::named("m3-max")?;
//! assert_eq!(hw.simd_width, 32);
//! // Reading and writing 64 MiB once, with one operation per element, is memory bound.
//! let r = Roofline::new(64 << 20, 8 << 20, &hw);
//! assert_eq!(r.limit, Some("memory"));
//! assert!("row_major|coalesced".parse::<MemoryLayout>()?.contains(MemoryLayout::COALESCED));
//! # Ok::<(), triton_metal::Error>(())
//! ```

pub(crate) mod axis;
pub mod barriers;
pub mod blocked;
pub mod buffers;
pub mod cpu;
pub mod fragments;
pub mod hardware;
pub mod layout;
pub mod options;
pub mod pipeline;
pub mod plan;
pub mod rows;
pub mod smem;
pub mod values;

pub use hardware::{Chip, HardwareProfile, TileShape, HW_ENV_VAR};
pub use layout::{MemoryLayout, Roofline};
