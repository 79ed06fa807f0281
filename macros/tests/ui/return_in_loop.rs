use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>, n: i32) {
    for i in tl::range(0, n) {
        if tl::load(x_ptr + i) < 0.0 {
            return;
        }
    }
}

fn main() {}
