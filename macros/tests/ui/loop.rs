use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>, n: i32) {
    let mut i = 0;
    loop {
        i += 1;
    }
}

fn main() {}
