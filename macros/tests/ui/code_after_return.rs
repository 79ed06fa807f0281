use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>) {
    return;
    tl::store(x_ptr, 1.0);
}

fn main() {}
