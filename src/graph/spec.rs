//! The op-graph JSON format and its validation into a [`Graph`].
//!
//! The seed tools' format is a list of standalone ops:
//! `{"ops":[{"type":"tt.sum","id":"s","input_shapes":[[512,512]],"args":{"axis":1}}]}`.
//! Graphs extend it: `inputs` declares named tensors, each op may list `inputs` (ids of graph
//! inputs or earlier ops) and `outputs` names the results (default: ops nobody consumes).
//! An op without `inputs` reads fresh graph inputs named `<op id>.in<i>`, shaped by its
//! `input_shapes`, so every seed file is also a valid graph.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::ops::{infer, OpArgs, OpKind};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// One op as written in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    /// Op type (`tt.sum`, `tt.dot`, `arith.addf`, ...).
    #[serde(rename = "type")]
    pub op_type: String,
    /// Unique id; generated as `op<index>` when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Operand shapes (required unless `inputs` is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_shapes: Option<Vec<Vec<i64>>>,
    /// Operand ids (graph inputs or earlier ops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<String>>,
    /// Op arguments (`axis`, `keep_dims`, `scalar`, `eps`, `perm`, `dtype`, ...). For an op
    /// without `inputs`, `dtype` is the dtype of its implicit inputs (default float32);
    /// for `tt.cast` it is the target.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
}

/// A declared graph input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Id ops refer to.
    pub id: String,
    /// Shape.
    pub shape: Vec<i64>,
    /// Dtype name (default `float32`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
}

/// A whole JSON document.
#[derive(Clone, Debug, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSpec {
    /// Declared inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<InputSpec>,
    /// Ops in evaluation order.
    pub ops: Vec<OpSpec>,
    /// Result ids (default: every op no other op consumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Vec<String>>,
}

impl GraphSpec {
    /// Parses JSON text; syntax errors carry serde's line and column.
    pub fn from_json(text: &str) -> Result<GraphSpec> {
        serde_json::from_str(text)
            .map_err(|e| Error::InvalidArgument(format!("malformed op-graph JSON: {e}")))
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

impl OpSpec {
    /// A standalone op with `input_shapes`.
    pub fn new(op_type: &str, id: &str, input_shapes: Vec<Vec<i64>>, args: Value) -> OpSpec {
        OpSpec {
            op_type: op_type.into(),
            id: Some(id.into()),
            input_shapes: Some(input_shapes),
            inputs: None,
            args: match args {
                Value::Object(m) => m,
                _ => Map::new(),
            },
        }
    }

    /// Parses the seed analyzer's `--operation` syntax: `TYPE:SHAPE[:AXIS]` where SHAPE
    /// is `[d0,d1,...]` or a list of shapes `[[..],[..]]`, e.g. `tt.reduce:[1024,512]:1`.
    pub fn from_operation_str(s: &str) -> Result<OpSpec> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "bad operation `{s}`: {why} (expected TYPE:[d0,d1,...][:AXIS], e.g. tt.reduce:[1024,512]:1)"
            ))
        };
        let (ty, rest) = s
            .split_once(':')
            .ok_or_else(|| bad("missing `:` after the type"))?;
        let ty = ty.trim();
        if ty.is_empty() {
            return Err(bad("empty op type"));
        }
        let rest = rest.trim();
        if !rest.starts_with('[') {
            return Err(bad("the shape must start with `[`"));
        }
        // The shape ends at the bracket that closes the first one.
        let mut depth = 0i32;
        let mut end = None;
        for (i, c) in rest.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let end = end.ok_or_else(|| bad("unbalanced brackets in the shape"))?;
        let shape_text = &rest[..=end];
        let v: Value = serde_json::from_str(shape_text)
            .map_err(|_| bad("the shape is not a list of integers"))?;
        let as_dims =
            |v: &Value| -> Option<Vec<i64>> { v.as_array()?.iter().map(|d| d.as_i64()).collect() };
        let shapes = match &v {
            Value::Array(xs) if xs.iter().all(|x| x.is_array()) && !xs.is_empty() => xs
                .iter()
                .map(as_dims)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("the shape is not a list of integers"))?,
            _ => vec![as_dims(&v).ok_or_else(|| bad("the shape is not a list of integers"))?],
        };
        let tail = rest[end + 1..].trim();
        let mut args = Map::new();
        if !tail.is_empty() {
            let axis = tail
                .strip_prefix(':')
                .ok_or_else(|| bad("junk after the shape"))?
                .trim();
            let a: i64 = axis
                .parse()
                .map_err(|_| bad("the axis is not an integer"))?;
            args.insert("axis".into(), Value::from(a));
        }
        Ok(OpSpec {
            op_type: ty.into(),
            id: Some(ty.trim_start_matches("tt.").replace('.', "_")),
            input_shapes: Some(shapes),
            inputs: None,
            args,
        })
    }
}

/// Shape and dtype of a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct TensorType {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Element type.
    #[serde(serialize_with = "ser_dtype")]
    pub dtype: DType,
}

fn ser_dtype<S: serde::Serializer>(d: &DType, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(d.mlx_name())
}

impl TensorType {
    /// Elements.
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d as u64).product()
    }

    /// Bytes in memory.
    pub fn bytes(&self) -> u64 {
        self.numel() * self.dtype.size_bytes() as u64
    }
}

/// A validated graph input.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GraphInput {
    /// Id.
    pub id: String,
    /// Type.
    #[serde(flatten)]
    pub ty: TensorType,
}

/// A validated op. Serializes in the input format (`type`, `id`, `inputs`, `args`) plus
/// its result `shape` and `dtype`.
#[derive(Clone, Debug, PartialEq)]
pub struct OpNode {
    /// Unique id; also the id of its result.
    pub id: String,
    /// What it computes.
    pub kind: OpKind,
    /// The type as written in the JSON (kept for reports).
    pub type_name: String,
    /// Typed arguments.
    pub args: OpArgs,
    /// Operand ids.
    pub inputs: Vec<String>,
    /// Result type.
    pub ty: TensorType,
}

impl Serialize for OpNode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("type", self.kind.name())?;
        m.serialize_entry("id", &self.id)?;
        m.serialize_entry("inputs", &self.inputs)?;
        m.serialize_entry("args", &self.args.to_json(self.kind))?;
        m.serialize_entry("shape", &self.ty.shape)?;
        m.serialize_entry("dtype", self.ty.dtype.mlx_name())?;
        m.end()
    }
}

/// A validated op graph: inputs, ops in evaluation order, outputs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Graph {
    /// Inputs (declared and implicit).
    pub inputs: Vec<GraphInput>,
    /// Ops, each reading only inputs and earlier ops.
    pub ops: Vec<OpNode>,
    /// Result ids.
    pub outputs: Vec<String>,
}

/// Largest tensor a graph may describe: far beyond any device's memory, small enough
/// that element and byte counts never overflow.
pub const MAX_ELEMENTS: u64 = 1 << 40;

fn check_size(shape: &[usize], field: &str) -> std::result::Result<(), String> {
    let mut n: u64 = 1;
    for &d in shape {
        n = n.saturating_mul(d as u64);
    }
    if n > MAX_ELEMENTS {
        return Err(format!("{field}: {shape:?} has more than 2^40 elements"));
    }
    Ok(())
}

fn dims(shape: &[i64], field: &str) -> std::result::Result<Vec<usize>, String> {
    let d = dims_unchecked(shape, field)?;
    check_size(&d, field)?;
    Ok(d)
}

fn dims_unchecked(shape: &[i64], field: &str) -> std::result::Result<Vec<usize>, String> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            if d <= 0 || d > i32::MAX as i64 {
                Err(format!(
                    "{field}[{i}]: dimension must be between 1 and {}, got {d}",
                    i32::MAX
                ))
            } else {
                Ok(d as usize)
            }
        })
        .collect()
}

fn dtype_of(name: Option<&str>, field: &str) -> std::result::Result<DType, String> {
    match name {
        None => Ok(DType::F32),
        Some(n) => DType::parse(n).ok_or(format!("{field}: unknown dtype `{n}`")),
    }
}

impl Graph {
    /// Parses and validates JSON text.
    pub fn from_json(text: &str) -> Result<Graph> {
        Graph::from_spec(&GraphSpec::from_json(text)?)
    }

    /// Validates a spec: known op types, well-formed shapes, no dangling or repeated ids,
    /// arity, shapes that fit the op. Errors name the op id and the field.
    pub fn from_spec(spec: &GraphSpec) -> Result<Graph> {
        let mut types: HashMap<String, TensorType> = HashMap::new();
        let mut inputs = Vec::new();
        for (i, inp) in spec.inputs.iter().enumerate() {
            let err = |m: String| Error::InvalidArgument(format!("input `{}`: {m}", inp.id));
            if inp.id.is_empty() {
                return Err(Error::InvalidArgument(format!("inputs[{i}]: empty id")));
            }
            let ty = TensorType {
                shape: dims(&inp.shape, "shape").map_err(err)?,
                dtype: dtype_of(inp.dtype.as_deref(), "dtype").map_err(err)?,
            };
            if types.insert(inp.id.clone(), ty.clone()).is_some() {
                return Err(err("id is used twice".into()));
            }
            inputs.push(GraphInput {
                id: inp.id.clone(),
                ty,
            });
        }
        if spec.ops.is_empty() {
            return Err(Error::InvalidArgument("the graph has no ops".into()));
        }
        let mut ops: Vec<OpNode> = Vec::new();
        let mut used: HashSet<String> = HashSet::new();
        for (index, op) in spec.ops.iter().enumerate() {
            let id = op.id.clone().unwrap_or_else(|| format!("op{index}"));
            let err =
                |m: String| Error::InvalidArgument(format!("op `{id}` ({}): {m}", op.op_type));
            if id.is_empty() {
                return Err(Error::InvalidArgument(format!("ops[{index}]: empty id")));
            }
            if types.contains_key(&id) {
                return Err(err("id is already used by an input or an earlier op".into()));
            }
            let kind = OpKind::parse(&op.op_type).ok_or_else(|| {
                err(format!(
                    "type: unknown op type `{}`; known types: {}",
                    op.op_type,
                    OpKind::ALL
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            let declared: Option<Vec<Vec<usize>>> = match &op.input_shapes {
                None => None,
                Some(shapes) => Some(
                    shapes
                        .iter()
                        .enumerate()
                        .map(|(i, s)| dims(s, &format!("input_shapes[{i}]")))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(err)?,
                ),
            };
            let operand_ids: Vec<String> = match (&op.inputs, &declared) {
                (Some(ids), _) => {
                    for (i, r) in ids.iter().enumerate() {
                        if !types.contains_key(r) {
                            let later = spec.ops[index..]
                                .iter()
                                .any(|o| o.id.as_deref() == Some(r.as_str()));
                            return Err(err(if later {
                                format!("inputs[{i}]: `{r}` is defined later; ops must come after the ops they read")
                            } else {
                                format!("inputs[{i}]: `{r}` is not a graph input or an earlier op")
                            }));
                        }
                    }
                    ids.clone()
                }
                (None, Some(shapes)) => {
                    let dtype = match op.args.get("dtype") {
                        Some(Value::String(s)) if kind != OpKind::Cast => {
                            dtype_of(Some(s), "args.dtype").map_err(err)?
                        }
                        _ => DType::F32,
                    };
                    shapes
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let in_id = format!("{id}.in{i}");
                            let ty = TensorType {
                                shape: s.clone(),
                                dtype,
                            };
                            types.insert(in_id.clone(), ty.clone());
                            inputs.push(GraphInput {
                                id: in_id.clone(),
                                ty,
                            });
                            in_id
                        })
                        .collect()
                }
                (None, None) => {
                    return Err(err("needs `inputs` or `input_shapes`".into()));
                }
            };
            let (lo, hi) = kind.arity();
            if operand_ids.len() < lo || operand_ids.len() > hi {
                let want = if lo == hi {
                    format!("{lo}")
                } else {
                    format!("{lo} to {hi}")
                };
                let field = if op.inputs.is_some() {
                    "inputs"
                } else {
                    "input_shapes"
                };
                return Err(err(format!(
                    "{field}: {kind} takes {want} operand(s), got {}",
                    operand_ids.len()
                )));
            }
            let shapes: Vec<Vec<usize>> =
                operand_ids.iter().map(|r| types[r].shape.clone()).collect();
            let dtypes: Vec<DType> = operand_ids.iter().map(|r| types[r].dtype).collect();
            if let (Some(decl), Some(_)) = (&declared, &op.inputs) {
                if decl.len() != shapes.len() {
                    return Err(err(format!(
                        "input_shapes: {} shapes for {} inputs",
                        decl.len(),
                        shapes.len()
                    )));
                }
                for (i, (d, s)) in decl.iter().zip(&shapes).enumerate() {
                    if d != s {
                        return Err(err(format!(
                            "input_shapes[{i}]: {d:?} but `{}` has shape {s:?}",
                            operand_ids[i]
                        )));
                    }
                }
            }
            let mut args_map = op.args.clone();
            if op.inputs.is_none() && kind != OpKind::Cast {
                args_map.remove("dtype");
            }
            let args = OpArgs::parse(kind, &args_map, shapes[0].len()).map_err(err)?;
            let (shape, dtype) = infer(kind, &args, &shapes, &dtypes).map_err(err)?;
            check_size(&shape, "result").map_err(err)?;
            for r in &operand_ids {
                used.insert(r.clone());
            }
            let ty = TensorType { shape, dtype };
            types.insert(id.clone(), ty.clone());
            ops.push(OpNode {
                id,
                kind,
                type_name: op.op_type.clone(),
                args,
                inputs: operand_ids,
                ty,
            });
        }
        let outputs = match &spec.outputs {
            Some(outs) => {
                if outs.is_empty() {
                    return Err(Error::InvalidArgument("outputs: empty list".into()));
                }
                let op_ids: HashSet<&str> = ops.iter().map(|op| op.id.as_str()).collect();
                for (i, o) in outs.iter().enumerate() {
                    if !op_ids.contains(o.as_str()) {
                        return Err(Error::InvalidArgument(format!(
                            "outputs[{i}]: `{o}` is not an op id"
                        )));
                    }
                }
                outs.clone()
            }
            None => ops
                .iter()
                .filter(|o| !used.contains(&o.id))
                .map(|o| o.id.clone())
                .collect(),
        };
        Ok(Graph {
            inputs,
            ops,
            outputs,
        })
    }

    /// The type of every value (inputs and op results) by id: one pass over the graph, for
    /// callers that look up many values ([`Graph::value_type`] scans the graph each call).
    pub fn types(&self) -> HashMap<&str, &TensorType> {
        let mut m = HashMap::with_capacity(self.inputs.len() + self.ops.len());
        // Reversed so that, as in `value_type`, an input wins over an op and an earlier op
        // over a later one of the same id.
        for o in self.ops.iter().rev() {
            m.insert(o.id.as_str(), &o.ty);
        }
        for i in self.inputs.iter().rev() {
            m.insert(i.id.as_str(), &i.ty);
        }
        m
    }

    /// The type of a value (input or op result).
    pub fn value_type(&self, id: &str) -> Option<&TensorType> {
        self.inputs
            .iter()
            .find(|i| i.id == id)
            .map(|i| &i.ty)
            .or_else(|| self.ops.iter().find(|o| o.id == id).map(|o| &o.ty))
    }

    /// The op with this id.
    pub fn op(&self, id: &str) -> Option<&OpNode> {
        self.ops.iter().find(|o| o.id == id)
    }

    /// For each value id, the indices of the ops that read it (once per operand slot).
    pub fn consumers(&self) -> HashMap<String, Vec<usize>> {
        let mut m: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, op) in self.ops.iter().enumerate() {
            for r in &op.inputs {
                m.entry(r.clone()).or_default().push(i);
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_format_parses() {
        let g = Graph::from_json(
            r#"{"ops":[{"type":"tt.reduce","id":"r","input_shapes":[[1024]],"args":{"axis":0}},
                       {"type":"tt.sum","id":"s","input_shapes":[[512,512]],"args":{"axis":1}}]}"#,
        )
        .unwrap();
        assert_eq!(g.inputs.len(), 2);
        assert_eq!(g.ops[1].ty.shape, vec![512]);
        assert_eq!(g.outputs, vec!["r", "s"]);
    }

    #[test]
    fn errors_name_op_and_field() {
        let e = Graph::from_json(r#"{"ops":[{"type":"tt.bogus","id":"b","input_shapes":[[4]]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("op `b` (tt.bogus): type: unknown op type"),
            "{e}"
        );
        let e =
            Graph::from_json(r#"{"ops":[{"type":"tt.add","id":"a","input_shapes":[[4,3],[5]]}]}"#)
                .unwrap_err()
                .to_string();
        assert!(e.contains("op `a` (tt.add): input_shapes[1]"), "{e}");
        let e = Graph::from_json(
            r#"{"inputs":[{"id":"x","shape":[4]}],"ops":[{"type":"tt.exp","id":"e","inputs":["y"]}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("inputs[0]: `y` is not a graph input"), "{e}");
        let e = Graph::from_json(r#"{"ops":[{"type":"tt.exp","id":"e","input_shapes":[[4,-1]]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("input_shapes[0][1]: dimension must be"), "{e}");
        let e = Graph::from_json(r#"{"ops":[{"type":"tt.dot","id":"d","input_shapes":[[4,4]]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("takes 2 operand(s), got 1"), "{e}");
        let e = Graph::from_json(r#"{"ops":[{"type":"tt.exp","id":"e","input_shape":[[4]]}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("malformed op-graph JSON: unknown field `input_shape`"),
            "{e}"
        );
    }

    #[test]
    fn validated_ops_serialize_back_to_the_input_format() {
        let text = r#"{"inputs":[{"id":"x","shape":[4,8]}],
            "ops":[{"type":"tt.sum","id":"s","inputs":["x"],"args":{"axis":1,"keep_dims":true}},
                   {"type":"arith.mulf","id":"m","inputs":["s"],"args":{"scalar":2.0}}]}"#;
        let g = Graph::from_json(text).unwrap();
        let v = serde_json::to_value(&g).unwrap();
        assert_eq!(v["ops"][0]["args"]["axis"], serde_json::json!([1]));
        assert_eq!(v["ops"][1]["type"], "tt.mul");
        // shape/dtype are results, not input fields: strip them and parse again.
        let ops: Vec<OpSpec> = v["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let mut o = o.clone();
                let m = o.as_object_mut().unwrap();
                m.remove("shape");
                m.remove("dtype");
                serde_json::from_value(o).unwrap()
            })
            .collect();
        let g2 = Graph::from_spec(&GraphSpec {
            inputs: vec![InputSpec {
                id: "x".into(),
                shape: vec![4, 8],
                dtype: None,
            }],
            ops,
            outputs: None,
        })
        .unwrap();
        assert_eq!(
            g2.ops,
            g.ops
                .iter()
                .map(|o| OpNode {
                    type_name: o.kind.name().into(),
                    ..o.clone()
                })
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn operation_strings() {
        let op = OpSpec::from_operation_str("tt.reduce:[1024,512]:1").unwrap();
        assert_eq!(op.input_shapes, Some(vec![vec![1024, 512]]));
        assert_eq!(op.args["axis"], 1);
        let op = OpSpec::from_operation_str("tt.dot:[[64,32],[32,16]]").unwrap();
        assert_eq!(op.input_shapes.unwrap().len(), 2);
        for bad in [
            "tt.sum",
            "tt.sum:1024",
            "tt.sum:[1024",
            "tt.sum:[a,b]",
            "tt.sum:[4]:x",
            ":[4]",
        ] {
            let e = OpSpec::from_operation_str(bad).unwrap_err().to_string();
            assert!(e.contains("bad operation"), "{bad}: {e}");
        }
    }
}
