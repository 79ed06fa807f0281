use triton_metal_macros::jit;

#[jit]
fn kernel(x_ptr: Ptr<F32>, n: i32, BLOCK: Constexpr) {
    let offs = tl::arange(0, BLOCK);
    let x = tl::load(x_ptr + offs, mask = offs < n, eviction_policy = "evict_last");
}

fn main() {}
