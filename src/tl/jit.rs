//! `jit`: a kernel closure, specialised (and cached) per set of constexpr values.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::builder::{op, op_any, run_build, Builder};
use super::tensor::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result, SourceLoc};
use crate::ir::{verify, Kernel, Param, ParamKind, Type, ValueDef};
use crate::passes::{pipeline, specialize_integers, IntSpec, PassOptions};

/// Declares a kernel's parameters inside the `jit` closure.
///
/// Runtime parameters ([`KernelBuilder::ptr`], [`KernelBuilder::scalar`]) are the launch
/// arguments, in declaration order; constexprs are given by name at launch and specialise
/// the kernel.
#[derive(Debug)]
pub struct KernelBuilder {
    _private: (),
}

fn declare(b: &mut Builder, name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_numeric());
    if !ok {
        return Err(format!(
            "`{name}` is not a valid parameter name (letters of any script, digits, `_`)"
        ));
    }
    if b.declared.iter().any(|n| n == name) {
        return Err(format!("parameter `{name}` is declared twice"));
    }
    b.declared.push(name.to_string());
    Ok(())
}

impl KernelBuilder {
    fn param(name: &str, kind: ParamKind, loc: SourceLoc) -> Tensor {
        op("param", loc, |b| {
            declare(b, name)?;
            let ty = match kind {
                ParamKind::Ptr(d) => Type::pointer(d),
                ParamKind::Scalar(d) => Type::scalar(d),
            };
            let idx = b.k.params.len() as u32;
            b.reordered |= !b.k.ops.is_empty();
            let v = b.new_value(ty, ValueDef::Param(idx));
            b.k.params.push(Param {
                name: name.to_string(),
                kind,
                value: v,
                stored: false,
                loaded: false,
            });
            Ok(v)
        })
    }

    /// A pointer parameter to elements of `dtype` (an array argument).
    #[track_caller]
    pub fn ptr(&mut self, dtype: DType, name: &str) -> Tensor {
        Self::param(name, ParamKind::Ptr(dtype), SourceLoc::caller())
    }

    /// A pointer parameter that the kernel only reads (Triton's `tl.const` annotation):
    /// a store or atomic through it is a build error naming the kernel, the argument and
    /// the line of the store.
    #[track_caller]
    pub fn const_ptr(&mut self, dtype: DType, name: &str) -> Tensor {
        let t = Self::param(name, ParamKind::Ptr(dtype), SourceLoc::caller());
        super::builder::with(|b| {
            if let Some(b) = b {
                if let Some(i) = b.k.params.iter().position(|p| p.name == name) {
                    b.const_params.push(i);
                }
            }
        });
        t
    }

    /// A scalar parameter passed by value (`i32`, `i64`, `f32`, `bool`, ...).
    #[track_caller]
    pub fn scalar(&mut self, dtype: DType, name: &str) -> Tensor {
        Self::param(name, ParamKind::Scalar(dtype), SourceLoc::caller())
    }

    /// A constexpr: its value for the specialisation being built (an error if not given).
    /// Asking again for the same name gives the same value.
    #[track_caller]
    pub fn constexpr(&mut self, name: &str) -> i64 {
        Self::constexpr_impl(name, None, SourceLoc::caller())
    }

    /// A constexpr with a default used when the launch does not give it.
    #[track_caller]
    pub fn constexpr_or(&mut self, name: &str, default: i64) -> i64 {
        Self::constexpr_impl(name, Some(default), SourceLoc::caller())
    }

    fn constexpr_impl(name: &str, default: Option<i64>, loc: SourceLoc) -> i64 {
        op_any("constexpr", loc, |b| {
            // Asking again for the same constexpr gives the same value.
            if let Some(v) = b.k.constexpr(name) {
                return Ok(v);
            }
            declare(b, name)?;
            let v = match (b.given.get(name), default) {
                (Some(v), _) => *v,
                (None, Some(d)) => d,
                (None, None) => {
                    b.wants_constexpr = true;
                    let given: Vec<&String> = b.given.keys().collect();
                    return Err(format!(
                        "constexpr `{name}` was not given (given: {given:?})"
                    ));
                }
            };
            b.k.constexprs.push((name.to_string(), v));
            Ok(v)
        })
        // After an error any value works: nothing more is recorded. 1 keeps shapes valid.
        .unwrap_or(1)
    }
}

type Body = dyn Fn(&mut KernelBuilder) + Send + Sync;

/// Optimised specialisations, per constexpr set and pass options.
type OptimizedCache = HashMap<(BTreeMap<String, i64>, PassOptions), Arc<Kernel>>;

type IntCache = HashMap<(BTreeMap<String, i64>, Option<PassOptions>, IntSpec), Arc<Kernel>>;

/// A `@triton.jit` kernel: the closure plus caches of its specialisations (as built, and
/// after the optimisation pipeline).
pub struct JitKernel {
    name: String,
    body: Arc<Body>,
    cache: Mutex<HashMap<BTreeMap<String, i64>, Arc<Kernel>>>,
    optimized: Mutex<OptimizedCache>,
    ints: Mutex<IntCache>,
}

impl std::fmt::Debug for JitKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitKernel")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Builds (records and verifies) one specialisation of `body` without caching.
pub fn build(
    name: &str,
    constexprs: &BTreeMap<String, i64>,
    body: impl FnOnce(&mut KernelBuilder),
) -> Result<Kernel> {
    let b = run_build(name, constexprs.clone(), || {
        body(&mut KernelBuilder { _private: () })
    });
    finish(b)
}

fn finish(b: Builder) -> Result<Kernel> {
    if let Some(e) = b.error {
        return Err(e);
    }
    let reordered = b.reordered;
    let mut k = b.k;
    let unknown: Vec<&String> = b
        .given
        .keys()
        .filter(|n| k.constexpr(n).is_none())
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&String> = k.constexprs.iter().map(|(n, _)| n).collect();
        return Err(Error::Build {
            kernel: k.name.clone(),
            op: "constexpr".into(),
            loc: SourceLoc {
                file: "<specialize>",
                line: 0,
                column: 0,
            },
            msg: format!("unknown constexpr(s) {unknown:?}; the kernel declares {known:?}"),
        });
    }
    // Drop constants left unused by splats and casts, and number values in program order.
    if k.remove_dead_ops() > 0 || reordered {
        k.compact();
    }
    verify(&k)?;
    k.compute_param_access();
    for &i in &b.const_params {
        if !k.params[i].stored {
            continue;
        }
        let name = k.params[i].name.clone();
        let at = k.store_through(i).map(|id| k.op(id));
        return Err(Error::Build {
            kernel: k.name.clone(),
            op: at.map_or("store", |o| o.op.name()).into(),
            loc: at.map_or(SourceLoc::caller(), |o| o.loc),
            msg: format!(
                "cannot store to constant pointer `{name}` (declared tl.const: ConstPtr / \
                 KernelBuilder::const_ptr); declare it Ptr to write through it"
            ),
        });
    }
    Ok(k)
}

/// `@triton.jit`: wraps a kernel closure. The closure runs once per constexpr set (at the
/// first [`JitKernel::specialize`] with that set); errors come back as [`Error::Build`]
/// naming the kernel, the op and the user's source line.
///
/// A kernel without constexprs is built right away, so its errors surface here.
pub fn jit(
    name: &str,
    body: impl Fn(&mut KernelBuilder) + Send + Sync + 'static,
) -> Result<JitKernel> {
    let valid = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !valid {
        return Err(Error::InvalidArgument(format!(
            "`{name}` is not a valid kernel name (letters of any script, digits, `_`)"
        )));
    }
    let jk = JitKernel {
        name: name.to_string(),
        body: Arc::new(body),
        cache: Mutex::new(HashMap::new()),
        optimized: Mutex::new(HashMap::new()),
        ints: Mutex::new(HashMap::new()),
    };
    // Trial build with no constexprs: catches errors early for kernels that need none.
    let empty = BTreeMap::new();
    let b = run_build(name, empty.clone(), || {
        (jk.body)(&mut KernelBuilder { _private: () })
    });
    if !b.wants_constexpr {
        let k = finish(b)?;
        jk.lock().insert(empty, Arc::new(k));
    }
    Ok(jk)
}

impl JitKernel {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<BTreeMap<String, i64>, Arc<Kernel>>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verified kernel for these constexpr values (built once per set, then cached).
    pub fn specialize(&self, constexprs: &BTreeMap<String, i64>) -> Result<Arc<Kernel>> {
        if let Some(k) = self.lock().get(constexprs) {
            return Ok(k.clone());
        }
        let k = Arc::new(self.build_uncached(constexprs)?);
        self.lock().insert(constexprs.clone(), k.clone());
        Ok(k)
    }

    /// [`JitKernel::specialize`] from `(name, value)` pairs.
    pub fn specialize_with(&self, constexprs: &[(&str, i64)]) -> Result<Arc<Kernel>> {
        let map = constexprs
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect();
        self.specialize(&map)
    }

    /// Builds a specialisation without touching the cache (for build-time benchmarks).
    pub fn build_uncached(&self, constexprs: &BTreeMap<String, i64>) -> Result<Kernel> {
        build(&self.name, constexprs, |kb| (self.body)(kb))
    }

    /// Number of cached specialisations.
    pub fn cached(&self) -> usize {
        self.lock().len()
    }

    /// The specialisation for `constexprs` after the optimisation pipeline
    /// ([`crate::passes::pipeline`]) with `opts`: the passes run once per constexpr set and
    /// options, later calls return the same `Arc`. With `TRITON_METAL_DEBUG` set, the first
    /// run prints the IR before and after and each pass's statistics.
    pub fn specialize_optimized(
        &self,
        constexprs: &BTreeMap<String, i64>,
        opts: &PassOptions,
    ) -> Result<Arc<Kernel>> {
        let key = (constexprs.clone(), *opts);
        if let Some(k) = self.lock_optimized().get(&key) {
            return Ok(k.clone());
        }
        let kernel = self.specialize(constexprs)?;
        let (optimized, stats) = pipeline(&kernel, opts)?;
        if crate::settings::debug_enabled() {
            eprintln!("[triton-metal] IR before optimisation:\n{}", kernel.ir());
            for s in &stats {
                eprintln!("[triton-metal]   {s}");
            }
            eprintln!("[triton-metal] IR after optimisation:\n{}", optimized.ir());
        }
        // Two threads optimising at once keep the first result, so every caller shares it.
        Ok(self
            .lock_optimized()
            .entry(key)
            .or_insert_with(|| Arc::new(optimized))
            .clone())
    }

    /// Number of cached optimised specialisations.
    pub fn cached_optimized(&self) -> usize {
        self.lock_optimized().len()
    }

    /// The specialisation for `constexprs` (after the optimisation pipeline with `opts`
    /// when given) with the integer facts of a launch's arguments applied
    /// ([`crate::passes::specialize_integers`]); built once per constexprs, options and
    /// facts. No facts: the specialisation itself.
    pub fn specialize_for_ints(
        &self,
        constexprs: &BTreeMap<String, i64>,
        opts: Option<&PassOptions>,
        ints: &IntSpec,
    ) -> Result<Arc<Kernel>> {
        let base = match opts {
            None => self.specialize(constexprs)?,
            Some(o) => self.specialize_optimized(constexprs, o)?,
        };
        if ints.is_empty() {
            return Ok(base);
        }
        let key = (constexprs.clone(), opts.copied(), ints.clone());
        let lock = || self.ints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = lock().get(&key) {
            return Ok(k.clone());
        }
        let k = specialize_integers(&base, ints);
        verify(&k)?;
        Ok(lock().entry(key).or_insert_with(|| Arc::new(k)).clone())
    }

    fn lock_optimized(&self) -> std::sync::MutexGuard<'_, OptimizedCache> {
        self.optimized.lock().unwrap_or_else(|e| e.into_inner())
    }
}
