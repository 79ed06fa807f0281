//! The examples' kernels, shared by the benches so each kernel is written once.
#![allow(dead_code)]

#[path = "../../examples/dropout.rs"]
pub mod dropout;
#[path = "../../examples/fused_softmax.rs"]
pub mod fused_softmax;
#[path = "../../examples/layer_norm.rs"]
pub mod layer_norm;
#[path = "../../examples/matmul.rs"]
pub mod matmul;
#[path = "../../examples/row_sum.rs"]
pub mod row_sum;
#[path = "../../examples/strided.rs"]
pub mod strided;
#[path = "../../examples/vector_add.rs"]
pub mod vector_add;
