use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>, n: i32, BLOCK: Constexpr) {
    let mut acc = tl::zeros([BLOCK], dtype = F32);
    for i in tl::range(0, n, BLOCK) {
        if i > 100 {
            break;
        }
        acc += tl::load(x_ptr + i + tl::arange(0, BLOCK));
    }
}

fn main() {}
