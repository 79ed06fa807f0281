use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>, BLOCK: Constexpr) {
    let mut total = tl::zeros([BLOCK], dtype = F32);
    let add = |x| {
        total = total + x;
    };
    add(tl::load(x_ptr + tl::arange(0, BLOCK)));
}

fn main() {}
