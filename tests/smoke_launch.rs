use triton_metal::runtime::{cpu_launch, KernelCall, MetalKernelCall, OutputSpec};
use triton_metal::{mlx, Array, DType, Error};

#[test]
fn cpu_primitive_outputs_are_lazy_mlx_arrays() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let outs = cpu_launch(
        "double",
        Box::new(|ins: &[&[u8]], outs: &mut [&mut [u8]]| {
            for (o, i) in outs[0].chunks_exact_mut(4).zip(ins[0].chunks_exact(4)) {
                let v = f32::from_ne_bytes(i.try_into().unwrap()) * 2.0;
                o.copy_from_slice(&v.to_ne_bytes());
            }
            Ok(())
        }),
        &[&x],
        &[OutputSpec {
            shape: vec![3],
            dtype: DType::F32,
        }],
    )
    .unwrap();
    let y = mlx::add(&outs[0], &x).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0, 6.0, 9.0]);
}

#[test]
fn cpu_primitive_errors_come_back_at_eval() {
    let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
    let outs = cpu_launch(
        "failing",
        Box::new(|_, _| {
            Err(Error::Runtime {
                kernel: "failing".into(),
                msg: "boom".into(),
            })
        }),
        &[&x],
        &[OutputSpec {
            shape: vec![1],
            dtype: DType::F32,
        }],
    )
    .unwrap();
    let y = mlx::exp(&outs[0]).unwrap();
    let e = y.eval().unwrap_err().to_string();
    assert!(e.contains("boom"), "{e}");
}

#[test]
fn metal_kernel_without_metal_is_an_error_and_traces() {
    let x = Array::from_slice(&[1.0f32; 16], &[16]).unwrap();
    let call = MetalKernelCall {
        kernel: KernelCall {
            name: "myadd",
            input_names: vec!["x".into()],
            output_names: vec!["out".into()],
            source: "uint i = thread_position_in_grid.x; out[i] = x[i] + 1.0f;",
            header: "",
            inputs: vec![&x],
            outputs: vec![OutputSpec {
                shape: vec![16],
                dtype: DType::F32,
            }],
            grid: [16, 1, 1],
            threadgroup: [16, 1, 1],
            init_value: None,
        },
        atomic_outputs: false,
    };
    let err = call
        .launch()
        .and_then(|o| o[0].eval())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Metal"), "{err}");
    let src = call.traced_source().unwrap();
    println!("{src}");
    assert!(src.contains("[[kernel]]"), "{src}");
    assert!(src.contains("thread_position_in_grid"), "{src}");
}
