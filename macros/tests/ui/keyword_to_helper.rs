use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>, BLOCK: Constexpr) {
    let x = tl::load(x_ptr + tl::arange(0, BLOCK));
    let y = scale(x, factor = 2.0);
}

fn main() {}
