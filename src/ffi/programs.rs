//! Names of the generated programs handed to MLX's custom kernels, so that MLX's errors,
//! which name only the program, can name the user's kernel too.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::error::Error;

/// Generated programs launched through MLX's custom kernels, by program name, with the
/// user's kernel name: MLX compiles them when the outputs are evaluated, and its errors then
/// name only the program.
fn programs() -> &'static Mutex<HashMap<String, String>> {
    static PROGRAMS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    PROGRAMS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Records that `program` (a generated program's name) was generated from kernel `kernel`.
pub(crate) fn register_program(program: &str, kernel: &str) {
    let mut map = programs().lock().unwrap_or_else(|e| e.into_inner());
    map.entry(program.to_string())
        .or_insert_with(|| kernel.to_string());
}

/// An MLX error that names generated programs gets their kernels' names in front.
pub(crate) fn name_programs(e: Error) -> Error {
    let Error::Mlx(msg) = e else { return e };
    let map = programs().lock().unwrap_or_else(|e| e.into_inner());
    let mut named: Vec<(&String, &String)> = map
        .iter()
        .filter(|(prog, kernel)| {
            msg.contains(prog.as_str()) && !msg.contains(&format!("kernel `{kernel}`"))
        })
        .collect();
    if named.is_empty() {
        return Error::Mlx(msg);
    }
    named.sort();
    let who: Vec<String> = named
        .iter()
        .map(|(prog, kernel)| format!("kernel `{kernel}` (generated program `{prog}`)"))
        .collect();
    Error::Mlx(format!("{}: {msg}", who.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlx_errors_naming_a_program_name_its_kernel() {
        register_program("tm_pgr_20000f6_20000dfe_0123456789abcdef", "größe");
        // As MLX's Metal back end reports a library that does not build.
        let e = name_programs(Error::Mlx(
            "[metal::Device] Unable to build metal library from source\n\
             custom_kernel_tm_pgr_20000f6_20000dfe_0123456789abcdef_float: error: ..."
                .into(),
        ))
        .to_string();
        assert!(
            e.contains(
                "kernel `größe` (generated program `tm_pgr_20000f6_20000dfe_0123456789abcdef`)"
            ),
            "{e}"
        );
        let other = name_programs(Error::Mlx("[eval] something else".into())).to_string();
        assert!(!other.contains("größe"), "{other}");
        let named = Error::Launch {
            kernel: "k".into(),
            msg: "m".into(),
        };
        assert_eq!(name_programs(named.clone()).to_string(), named.to_string());
    }
}
