use triton_metal_macros::jit;

#[jit]
fn kernel(x: &[f32], n: i32) {}

fn main() {}
