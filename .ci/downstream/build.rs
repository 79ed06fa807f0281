// The build script the README gives to crates that depend on triton-metal.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
