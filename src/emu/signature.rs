//! MLX's `metal_kernel` signature writer, reproduced exactly.
//!
//! MLX (0.32.4, `mlx/backend/common/metal_kernel.cpp`) never compiles the `source` we hand
//! it as-is: it writes a `[[kernel]]` signature around it whose parameters depend on the
//! inputs' dtypes and sizes and on which names appear *as substrings* of the source. The
//! emulator must compile exactly what a Mac would, and the code generator must know the
//! parameter list, so both read it from here. [`MlxKernel::source`] is byte-for-byte what
//! MLX prints with `verbose=true` (between the fences of [`MlxKernel::verbose_output`]);
//! a test compares the two once the bridge can capture MLX's own output.

use crate::{DType, Error, Result};

pub use crate::mlx_abi::{MAX_CONSTANT_ARRAY_SIZE, METAL_ATTRIBUTES};

/// A template argument of a `metal_kernel` call (MLX's `TemplateArg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TemplateArg {
    /// `int` parameter.
    Int(i32),
    /// `bool` parameter (MLX prints it as `1`/`0`).
    Bool(bool),
    /// `typename` parameter, printed as MLX's type name.
    DType(DType),
}

/// One input as `write_signature` sees it: only its dtype and shape matter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SigInput {
    /// Parameter name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a 0-d array).
    pub shape: Vec<usize>,
}

impl SigInput {
    /// Number of elements (1 for 0-d).
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when MLX passes it in the `constant` address space.
    pub fn is_constant(&self) -> bool {
        self.size() < MAX_CONSTANT_ARRAY_SIZE
    }

    /// True when MLX passes it by reference (0-d arrays).
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }
}

/// One parameter of the generated kernel, in order; buffers carry their `[[buffer(i)]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// Input `i`: `const device T*`, `const constant T*` or `const constant T&`.
    Input {
        /// Index into the inputs.
        input: usize,
        /// Buffer slot.
        buffer: usize,
    },
    /// `const constant int* <name>_shape` of input `i`.
    Shape {
        /// Index into the inputs.
        input: usize,
        /// Buffer slot.
        buffer: usize,
    },
    /// `const constant int64_t* <name>_strides` of input `i`.
    Strides {
        /// Index into the inputs.
        input: usize,
        /// Buffer slot.
        buffer: usize,
    },
    /// `const constant int& <name>_ndim` of input `i`.
    Ndim {
        /// Index into the inputs.
        input: usize,
        /// Buffer slot.
        buffer: usize,
    },
    /// Output `i`: `device T*` (or `device atomic<T>*`).
    Output {
        /// Index into the outputs.
        output: usize,
        /// Buffer slot.
        buffer: usize,
    },
    /// A Metal attribute such as `thread_position_in_grid`, with its type.
    Attribute {
        /// Attribute (and parameter) name.
        name: &'static str,
        /// `uint` or `uint3`.
        ty: &'static str,
    },
}

/// Everything one `fast::metal_kernel(...)(...)` call feeds into MLX's source generation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MlxKernel {
    /// The `name` given to `metal_kernel` (MLX prefixes `custom_kernel_`).
    pub name: String,
    /// Code placed before the kernel (helper functions, includes).
    pub header: String,
    /// The kernel body.
    pub source: String,
    /// Inputs in call order.
    pub inputs: Vec<SigInput>,
    /// Outputs in call order: name and dtype.
    pub outputs: Vec<(String, DType)>,
    /// Template arguments in call order.
    pub template_args: Vec<(String, TemplateArg)>,
    /// `atomic_outputs` of `metal_kernel`.
    pub atomic_outputs: bool,
}

/// MLX's `get_type_string`: the Metal spelling of a dtype in generated signatures.
pub fn type_string(d: DType) -> &'static str {
    match d {
        DType::F32 => "float",
        DType::F16 => "float16_t",
        DType::BF16 => "bfloat16_t",
        DType::F64 => "double",
        DType::Bool => "bool",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
    }
}

impl MlxKernel {
    fn check(&self) -> Result<()> {
        if self.outputs.is_empty() {
            return Err(Error::Launch {
                kernel: self.name.clone(),
                msg: "[metal_kernel] Must specify at least one output.".into(),
            });
        }
        Ok(())
    }

    /// Per input: whether `<name>_shape`, `_strides`, `_ndim` occur in the source.
    pub fn shape_infos(&self) -> Vec<(bool, bool, bool)> {
        self.inputs
            .iter()
            .map(|i| {
                let has = |suffix: &str| self.source.contains(&format!("{}{}", i.name, suffix));
                (has("_shape"), has("_strides"), has("_ndim"))
            })
            .collect()
    }

    /// The Metal attributes that occur in the source, in MLX's table order.
    pub fn attributes(&self) -> Vec<(&'static str, &'static str)> {
        METAL_ATTRIBUTES
            .iter()
            .copied()
            .filter(|(attr, _)| self.source.contains(attr))
            .collect()
    }

    /// MLX's `write_template`: `<1, float, 0>`; empty without template arguments.
    pub fn template_def(&self) -> String {
        if self.template_args.is_empty() {
            return String::new();
        }
        let args: Vec<String> = self
            .template_args
            .iter()
            .map(|(_, a)| match a {
                TemplateArg::Int(v) => v.to_string(),
                TemplateArg::Bool(b) => (*b as i32).to_string(),
                TemplateArg::DType(d) => type_string(*d).to_string(),
            })
            .collect();
        format!("<{}>", args.join(", "))
    }

    /// The host name of the compiled function: `custom_kernel_<name>[_<template hash>]`
    /// followed by one dtype suffix per input (`s` for 0-d, `c` for `constant`) and output.
    pub fn kernel_name(&self) -> Result<String> {
        self.check()?;
        let mut name = format!("custom_kernel_{}", self.name);
        let def = self.template_def();
        if !def.is_empty() {
            name.push('_');
            name.push_str(&template_hash(&def));
        }
        for i in &self.inputs {
            name.push('_');
            name.push_str(type_string(i.dtype));
            if i.is_scalar() {
                name.push('s');
            } else if i.is_constant() {
                name.push('c');
            }
        }
        for (_, d) in &self.outputs {
            name.push('_');
            name.push_str(type_string(*d));
        }
        Ok(name)
    }

    /// The kernel's parameters in signature order, with buffer slots.
    pub fn params(&self) -> Vec<Param> {
        let mut params = Vec::new();
        let mut buffer = 0;
        for (input, (i, info)) in self.inputs.iter().zip(self.shape_infos()).enumerate() {
            params.push(Param::Input { input, buffer });
            buffer += 1;
            if i.is_scalar() {
                continue;
            }
            if info.0 {
                params.push(Param::Shape { input, buffer });
                buffer += 1;
            }
            if info.1 {
                params.push(Param::Strides { input, buffer });
                buffer += 1;
            }
            if info.2 {
                params.push(Param::Ndim { input, buffer });
                buffer += 1;
            }
        }
        for output in 0..self.outputs.len() {
            params.push(Param::Output { output, buffer });
            buffer += 1;
        }
        for (name, ty) in self.attributes() {
            params.push(Param::Attribute { name, ty });
        }
        params
    }

    /// The exact source MLX hands to the Metal compiler after its `metal::utils()`
    /// preamble (and prints with `verbose=true`).
    pub fn source(&self) -> Result<String> {
        let kernel_name = self.kernel_name()?;
        let mut s = write_signature(self, &kernel_name);
        let def = self.template_def();
        if !def.is_empty() {
            let full = format!("{kernel_name}{def}");
            s.push_str(&format!(
                "\ntemplate [[host_name(\"{kernel_name}\")]] [[kernel]] decltype({full}) {full};\n"
            ));
        }
        Ok(s)
    }

    /// What MLX writes to stdout for this call with `verbose=true`.
    pub fn verbose_output(&self) -> Result<String> {
        Ok(format!(
            "Generated source code for `{}`:\n```\n{}\n```\n",
            self.name,
            self.source()?
        ))
    }
}

/// MLX's `make_template_hash`: `<` and `>` become `_`, `, ` becomes `_`, last char dropped.
fn template_hash(def: &str) -> String {
    let mut out = def.replace(", ", "_").replace(['<', '>'], "_");
    out.pop();
    out
}

/// MLX's `write_signature`, statement for statement (including how it places the closing
/// `) {`, which it decides from a count that ignores shape buffers).
fn write_signature(k: &MlxKernel, func_name: &str) -> String {
    let mut s = String::with_capacity(k.header.len() + k.source.len() + 1024);
    s.push_str(&k.header);
    if !k.template_args.is_empty() {
        let params: Vec<String> = k
            .template_args
            .iter()
            .map(|(name, a)| {
                let ty = match a {
                    TemplateArg::Int(_) => "int",
                    TemplateArg::Bool(_) => "bool",
                    TemplateArg::DType(_) => "typename",
                };
                format!("{ty} {name}")
            })
            .collect();
        s.push_str(&format!("template <{}>\n", params.join(", ")));
    }
    s.push_str("[[kernel]] void ");
    s.push_str(func_name);
    s.push_str("(\n");
    let shape_infos = k.shape_infos();
    let attributes = k.attributes();
    let mut index = 0usize;
    for (i, input) in k.inputs.iter().enumerate() {
        let location = if input.is_constant() {
            "constant"
        } else {
            "device"
        };
        let r = if input.is_scalar() { "&" } else { "*" };
        s.push_str(&format!(
            "  const {location} {}{r} {} [[buffer({index})]],\n",
            type_string(input.dtype),
            input.name
        ));
        index += 1;
        if !input.is_scalar() {
            let (shape, strides, ndim) = shape_infos[i];
            if shape {
                s.push_str(&format!(
                    "  const constant int* {}_shape [[buffer({index})]],\n",
                    input.name
                ));
                index += 1;
            }
            if strides {
                s.push_str(&format!(
                    "  const constant int64_t* {}_strides [[buffer({index})]],\n",
                    input.name
                ));
                index += 1;
            }
            if ndim {
                s.push_str(&format!(
                    "  const constant int& {}_ndim [[buffer({index})]],\n",
                    input.name
                ));
                index += 1;
            }
        }
    }
    for (name, dtype) in &k.outputs {
        s.push_str("  device ");
        let ty = type_string(*dtype);
        if k.atomic_outputs {
            s.push_str(&format!("atomic<{ty}>"));
        } else {
            s.push_str(ty);
        }
        s.push_str(&format!("* {name} [[buffer({index})]]"));
        if index + 1 < k.inputs.len() + k.outputs.len() || !attributes.is_empty() {
            s.push_str(",\n");
        } else {
            s.push_str(") {\n");
        }
        index += 1;
    }
    for (n, (attr, ty)) in attributes.iter().enumerate() {
        s.push_str(&format!("  {ty} {attr} [[{attr}]]"));
        if n + 1 < attributes.len() {
            s.push_str(",\n");
        } else {
            s.push_str(") {\n");
        }
    }
    s.push_str(&k.source);
    s.push_str("\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, dtype: DType, shape: &[usize]) -> SigInput {
        SigInput {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn vector_add_signature_matches_mlx() {
        let k = MlxKernel {
            name: "add".into(),
            header: String::new(),
            source: "uint i = thread_position_in_grid.x;\n  out[i] = a[i] + b[i];".into(),
            inputs: vec![input("a", DType::F32, &[16]), input("b", DType::F32, &[16])],
            outputs: vec![("out".into(), DType::F32)],
            template_args: vec![],
            atomic_outputs: false,
        };
        assert_eq!(
            k.kernel_name().unwrap(),
            "custom_kernel_add_float_float_float"
        );
        let expected = "[[kernel]] void custom_kernel_add_float_float_float(\n  const device float* a [[buffer(0)]],\n  const device float* b [[buffer(1)]],\n  device float* out [[buffer(2)]],\n  uint3 thread_position_in_grid [[thread_position_in_grid]]) {\nuint i = thread_position_in_grid.x;\n  out[i] = a[i] + b[i];\n}\n";
        assert_eq!(k.source().unwrap(), expected);
    }

    #[test]
    fn constant_scalar_shape_template_and_atomic_forms() {
        let k = MlxKernel {
            name: "k".into(),
            header: "// helpers\n".into(),
            source: "x_shape[0]; x_ndim; n; thread_index_in_simdgroup; threadgroup_position_in_grid; T; BLOCK;".into(),
            inputs: vec![
                input("x", DType::F16, &[4, 4]),
                input("c", DType::I32, &[3]),
                input("n", DType::U32, &[]),
            ],
            outputs: vec![("o".into(), DType::F32)],
            template_args: vec![
                ("T".into(), TemplateArg::DType(DType::BF16)),
                ("BLOCK".into(), TemplateArg::Int(128)),
                ("FLAG".into(), TemplateArg::Bool(true)),
            ],
            atomic_outputs: true,
        };
        let name = k.kernel_name().unwrap();
        // The double underscore is MLX's: the template hash starts with the `_` of `<`.
        assert_eq!(
            name,
            "custom_kernel_k__bfloat16_t_128_1_float16_t_int32_tc_uint32_ts_float"
        );
        let src = k.source().unwrap();
        let expected = format!(
            "// helpers\ntemplate <typename T, int BLOCK, bool FLAG>\n[[kernel]] void {name}(\n  const device float16_t* x [[buffer(0)]],\n  const constant int* x_shape [[buffer(1)]],\n  const constant int& x_ndim [[buffer(2)]],\n  const constant int32_t* c [[buffer(3)]],\n  const constant uint32_t& n [[buffer(4)]],\n  device atomic<float>* o [[buffer(5)]],\n  uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],\n  uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {{\n{}\n}}\n\ntemplate [[host_name(\"{name}\")]] [[kernel]] decltype({name}<bfloat16_t, 128, 1>) {name}<bfloat16_t, 128, 1>;\n",
            k.source
        );
        assert_eq!(src, expected);
        assert_eq!(
            k.params(),
            vec![
                Param::Input {
                    input: 0,
                    buffer: 0
                },
                Param::Shape {
                    input: 0,
                    buffer: 1
                },
                Param::Ndim {
                    input: 0,
                    buffer: 2
                },
                Param::Input {
                    input: 1,
                    buffer: 3
                },
                Param::Input {
                    input: 2,
                    buffer: 4
                },
                Param::Output {
                    output: 0,
                    buffer: 5
                },
                Param::Attribute {
                    name: "thread_index_in_simdgroup",
                    ty: "uint"
                },
                Param::Attribute {
                    name: "threadgroup_position_in_grid",
                    ty: "uint3"
                },
            ]
        );
    }

    #[test]
    fn mlx_quirk_shape_buffers_close_the_signature_early() {
        // MLX compares the slot index (which counts shape buffers) against inputs +
        // outputs only, so with a shape buffer and no attributes the first of two
        // outputs gets `) {`; Metal then rejects it. We reproduce it so the emulator
        // fails where a Mac would.
        let k = MlxKernel {
            name: "q".into(),
            header: String::new(),
            source: "o[0] = x_shape[0];".into(),
            inputs: vec![input("x", DType::F32, &[8])],
            outputs: vec![("o".into(), DType::F32), ("p".into(), DType::F32)],
            template_args: vec![],
            atomic_outputs: false,
        };
        assert!(k
            .source()
            .unwrap()
            .contains("device float* o [[buffer(2)]]) {\n  device float* p [[buffer(3)]]) {\n"));
        assert!(matches!(
            MlxKernel {
                outputs: vec![],
                ..k
            }
            .source(),
            Err(Error::Launch { .. })
        ));
    }
}
