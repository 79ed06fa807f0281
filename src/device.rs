//! Devices and hardware detection through MLX.

use std::collections::BTreeMap;
use std::fmt;

use crate::error::Result;
use crate::ffi::bridge;

/// Where MLX runs work by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The CPU (kernels run on the CPU executor).
    Cpu,
    /// The GPU (Metal on macOS, CUDA with feature `cuda`).
    Gpu,
}

/// The GPU programming model behind a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Apple GPU through Metal.
    Metal,
    /// NVIDIA GPU through CUDA.
    Cuda,
    /// No GPU: the CPU executor.
    Cpu,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Metal => "metal",
            Backend::Cuda => "cuda",
            Backend::Cpu => "cpu",
        })
    }
}

/// MLX's default device.
pub fn default_device() -> Result<Device> {
    Ok(if bridge::default_device_type()? == 1 {
        Device::Gpu
    } else {
        Device::Cpu
    })
}

/// Changes MLX's default device (errors if it is not available).
pub fn set_default_device(d: Device) -> Result<()> {
    if d == Device::Gpu && !bridge::metal_is_available()? && !bridge::cuda_is_available()? {
        return Err(crate::Error::Unsupported(
            "no GPU is available to MLX in this build (Linux CPU wheel)".into(),
        ));
    }
    bridge::set_default_device_type(if d == Device::Gpu { 1 } else { 0 })?;
    Ok(())
}

/// MLX's version string.
pub fn mlx_version() -> Result<String> {
    Ok(bridge::mlx_version()?)
}

/// What the default device is, as far as kernels care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardwareInfo {
    /// Backend kernels will use.
    pub backend: Backend,
    /// Device name (CUDA device name, Apple GPU name, or CPU model).
    pub name: String,
    /// Metal GPU architecture string from MLX (e.g. `applegpu_g15s`), if Metal.
    pub architecture: Option<String>,
    /// Apple chip generation 1..=4 (M1..M4), when it can be told from the architecture.
    pub apple_generation: Option<u32>,
    /// Every key MLX reported for the device.
    pub raw: BTreeMap<String, String>,
}

impl HardwareInfo {
    /// Reads the default device's information from MLX.
    pub fn detect() -> Result<HardwareInfo> {
        let raw: BTreeMap<String, String> = bridge::device_info_pairs()?
            .into_iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        let gpu = default_device()? == Device::Gpu;
        let backend = if gpu && bridge::metal_is_available()? {
            Backend::Metal
        } else if gpu && bridge::cuda_is_available()? {
            Backend::Cuda
        } else {
            Backend::Cpu
        };
        let architecture = raw
            .get("architecture")
            .cloned()
            .filter(|_| backend == Backend::Metal);
        let apple_generation = architecture.as_deref().and_then(apple_generation_of);
        let name = match backend {
            Backend::Cpu => cpu_model().unwrap_or_else(|| {
                raw.get("device_name")
                    .cloned()
                    .unwrap_or_else(|| "cpu".into())
            }),
            _ => raw
                .get("device_name")
                .cloned()
                .unwrap_or_else(|| "unknown GPU".into()),
        };
        Ok(HardwareInfo {
            backend,
            name,
            architecture,
            apple_generation,
            raw,
        })
    }
}

/// Apple GPU architecture strings look like `applegpu_g13g` (M1), `g14` (M2), `g15`
/// (M3), `g16` (M4); the family number is the generation + 12.
pub fn apple_generation_of(arch: &str) -> Option<u32> {
    let pos = arch.find("_g")?;
    let digits: String = arch[pos + 2..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let family: u32 = digits.parse().ok()?;
    (13..=16).contains(&family).then(|| family - 12)
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apple_generations() {
        assert_eq!(apple_generation_of("applegpu_g13g"), Some(1));
        assert_eq!(apple_generation_of("applegpu_g14s"), Some(2));
        assert_eq!(apple_generation_of("applegpu_g15d"), Some(3));
        assert_eq!(apple_generation_of("applegpu_g16c"), Some(4));
        assert_eq!(apple_generation_of("x86_64"), None);
    }

    #[test]
    fn detects_the_cpu_here() {
        let hw = HardwareInfo::detect().unwrap();
        if default_device().unwrap() == Device::Cpu {
            assert_eq!(hw.backend, Backend::Cpu);
            assert!(!hw.name.is_empty());
        }
    }
}
