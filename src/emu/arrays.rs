//! Bridges between MLX arrays / `metal_kernel` calls and the emulator, so a launch built
//! for a Mac can be run unchanged on Linux.

use super::{run, EmuBuffer, LaneOrder, MetalLaunch, OutputSpec};
use crate::runtime::MetalKernelCall;
use crate::{Array, DType, Result};

/// Calls `$f::<T>` with the Rust element type of `$dtype`.
macro_rules! with_element {
    ($dtype:expr, $f:ident ( $($arg:expr),* )) => {
        match $dtype {
            DType::Bool => $f::<bool>($($arg),*),
            DType::I8 => $f::<i8>($($arg),*),
            DType::I16 => $f::<i16>($($arg),*),
            DType::I32 => $f::<i32>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
            DType::U8 => $f::<u8>($($arg),*),
            DType::U16 => $f::<u16>($($arg),*),
            DType::U32 => $f::<u32>($($arg),*),
            DType::U64 => $f::<u64>($($arg),*),
            DType::F16 => $f::<half::f16>($($arg),*),
            DType::BF16 => $f::<half::bf16>($($arg),*),
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
        }
    };
}

fn buffer_of<T: crate::Element>(name: &str, a: &Array) -> Result<EmuBuffer> {
    Ok(EmuBuffer::new(name, &a.shape(), &a.to_vec::<T>()?))
}

fn array_of<T: crate::Element>(b: &EmuBuffer) -> Result<Array> {
    Array::from_slice(&b.to_vec::<T>()?, &b.shape)
}

impl EmuBuffer {
    /// The (evaluated, row-major) contents of an MLX array.
    pub fn from_array(name: &str, a: &Array) -> Result<EmuBuffer> {
        with_element!(a.dtype(), buffer_of(name, a))
    }

    /// An MLX array holding this buffer's elements.
    pub fn to_array(&self) -> Result<Array> {
        with_element!(self.dtype, array_of(self))
    }
}

impl MetalLaunch {
    /// The launch that `call.launch()` would make on a Mac (MLX copies inputs to row-major
    /// order, which [`EmuBuffer::from_array`] does too).
    pub fn from_call(call: &MetalKernelCall<'_>) -> Result<MetalLaunch> {
        let k = &call.kernel;
        let mut launch = MetalLaunch::new(k.name, k.source)
            .header(k.header)
            .grid(k.grid)
            .threadgroup(k.threadgroup)
            .atomic_outputs(call.atomic_outputs);
        for (name, a) in k.input_names.iter().zip(&k.inputs) {
            launch = launch.input(EmuBuffer::from_array(name, a)?);
        }
        for (name, o) in k.output_names.iter().zip(&k.outputs) {
            let mut spec = OutputSpec::new(name, o.dtype, &o.shape);
            spec.init = k.init_value;
            launch = launch.output(spec);
        }
        Ok(launch)
    }
}

/// Runs a `metal_kernel` call in the emulator, returning MLX arrays like `call.launch()`.
pub fn run_call(call: &MetalKernelCall<'_>, order: LaneOrder) -> Result<Vec<Array>> {
    let launch = MetalLaunch::from_call(call)?.lane_order(order);
    run(&launch)?.iter().map(EmuBuffer::to_array).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime;

    #[test]
    fn a_metal_kernel_call_runs_in_the_emulator() {
        if !crate::emu::Emulator::should_run("a_metal_kernel_call_runs_in_the_emulator")
            .unwrap_or_else(|e| panic!("{e}"))
        {
            return;
        }
        let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4]).unwrap();
        let h = Array::from_slice(&[half::f16::from_f32(0.5); 8], &[8]).unwrap();
        let call = MetalKernelCall {
            kernel: runtime::KernelCall {
                name: "axpy",
                input_names: vec!["x".into(), "h".into()],
                output_names: vec!["out".into()],
                source:
                    "uint i = thread_position_in_grid.x;\n  if (i < 6) out[i] = x[i] * float(h[i]);",
                header: "",
                inputs: vec![&x, &h],
                outputs: vec![runtime::OutputSpec {
                    shape: vec![8],
                    dtype: DType::F32,
                }],
                grid: [8, 1, 1],
                threadgroup: [4, 1, 1],
                init_value: Some(-1.0),
            },
            atomic_outputs: false,
        };
        for order in [LaneOrder::Forward, LaneOrder::Reverse] {
            let out = run_call(&call, order).unwrap();
            assert_eq!(
                out[0].to_vec::<f32>().unwrap(),
                vec![0.5, 1.0, 1.5, 2.0, 2.5, 3.0, -1.0, -1.0]
            );
        }
    }
}
