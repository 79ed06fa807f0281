//! Autotuning: time a kernel's candidate configs on the current device, keep the fastest per
//! (kernel, shapes, dtypes, device), and remember the choice on disk.
//!
//! The cache file (JSON) is `$TRITON_METAL_CACHE_DIR/autotune.json`, else
//! `$XDG_CACHE_HOME/triton-metal/autotune.json`, else `~/.cache/triton-metal/autotune.json`
//! ([`default_cache_file`]); a file that another user could have written is ignored, and a
//! folder that others can write to is refused when saving. Each entry stores a checksum of
//! the candidate list, so changing the candidates invalidates it (CubeCL's tune cache does
//! the same).
//!
//! ```no_run
//! use triton_metal::tune::{Autotuner, Config, TuneKey};
//! # fn demo(add: &triton_metal::tl::JitKernel, x: &triton_metal::Array, y: &triton_metal::Array) -> triton_metal::Result<()> {
//! use triton_metal::runtime::{cdiv, grid, out_like};
//! let n = x.size();
//! let configs = [256, 1024, 4096].map(|b| Config::new(&[("BLOCK_SIZE", b)], 4)).to_vec();
//! let best = Autotuner::new(add, configs).tune(&TuneKey::of(&[x, y]), |cfg| {
//!     cfg.apply(add.launch())
//!         .grid(grid(move |m| [cdiv(n, m["BLOCK_SIZE"])]))
//!         .args((x, y, out_like(x), n as i32))
//!         .run()
//! })?;
//! println!("fastest: {}", best.config);
//! # Ok(()) }
//! ```

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::array::Array;
use crate::device::HardwareInfo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::Launch;
use crate::tl::JitKernel;

/// One candidate: constexprs and warps per program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Config {
    /// Constexpr values, by name.
    pub constexprs: Vec<(String, i64)>,
    /// Warps per program (GPU targets).
    pub num_warps: usize,
}

impl Config {
    /// A config from `(name, value)` pairs.
    pub fn new(constexprs: &[(&str, i64)], num_warps: usize) -> Config {
        Config {
            constexprs: constexprs
                .iter()
                .map(|(n, v)| (n.to_string(), *v))
                .collect(),
            num_warps,
        }
    }

    /// Sets this config's constexprs and `num_warps` on a launch.
    pub fn apply<'k>(&self, mut launch: Launch<'k>) -> Launch<'k> {
        for (n, v) in &self.constexprs {
            launch = launch.constexpr(n, *v);
        }
        launch.num_warps(self.num_warps)
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, v) in &self.constexprs {
            write!(f, "{n}={v} ")?;
        }
        write!(f, "num_warps={}", self.num_warps)
    }
}

/// What the choice depends on besides the kernel: argument shapes and dtypes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TuneKey {
    /// Shapes of the array arguments.
    pub shapes: Vec<Vec<usize>>,
    /// Their dtypes.
    pub dtypes: Vec<DType>,
}

impl TuneKey {
    /// The key of a set of array arguments.
    pub fn of(arrays: &[&Array]) -> TuneKey {
        TuneKey {
            shapes: arrays.iter().map(|a| a.shape()).collect(),
            dtypes: arrays.iter().map(|a| a.dtype()).collect(),
        }
    }
}

/// The outcome of [`Autotuner::tune`].
#[derive(Clone, Debug, PartialEq)]
pub struct Tuned {
    /// The fastest config.
    pub config: Config,
    /// Its index in the candidate list.
    pub index: usize,
    /// Median time per candidate (`None`: it failed, or the result came from the cache).
    pub timings: Vec<Option<Duration>>,
    /// True when the choice was read from the cache file instead of measured.
    pub from_cache: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    checksum: u64,
    index: usize,
    config: Config,
}

/// Times candidate configs of one kernel.
pub struct Autotuner<'k> {
    kernel: &'k JitKernel,
    configs: Vec<Config>,
    cache_file: Option<PathBuf>,
    reps: usize,
    progress: bool,
}

/// The default cache file (see the module docs), whose folder is created (mode 0700) and
/// checked when the file is written.
pub fn default_cache_file() -> PathBuf {
    crate::cache::location(crate::cache::Purpose::Root)
        .path
        .join("autotune.json")
}

impl<'k> Autotuner<'k> {
    /// A tuner over `configs` (in order; ties go to the earlier one).
    pub fn new(kernel: &'k JitKernel, configs: Vec<Config>) -> Autotuner<'k> {
        Autotuner {
            kernel,
            configs,
            cache_file: Some(default_cache_file()),
            reps: 5,
            progress: std::io::stderr().is_terminal(),
        }
    }

    /// Uses another cache file; `None` disables the disk cache.
    pub fn cache_file(mut self, path: Option<PathBuf>) -> Self {
        self.cache_file = path;
        self
    }

    /// Timed runs per candidate (the median counts; default 5, at least 1).
    pub fn reps(mut self, reps: usize) -> Self {
        self.reps = reps.max(1);
        self
    }

    /// Shows a progress bar on stderr (default: when stderr is a terminal).
    pub fn progress(mut self, show: bool) -> Self {
        self.progress = show;
        self
    }

    fn checksum(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.configs.hash(&mut h);
        h.finish()
    }

    fn entry_key(&self, key: &TuneKey) -> Result<String> {
        let device = HardwareInfo::detect()?;
        Ok(format!(
            "{}|{:?}|{}|{}",
            self.kernel.name(),
            key.shapes,
            key.dtypes
                .iter()
                .map(|d| d.short_name())
                .collect::<Vec<_>>()
                .join(","),
            format_args!("{}:{}", device.backend, device.name)
        ))
    }

    fn load(&self) -> BTreeMap<String, Entry> {
        // A file someone else could have written is not trusted: tuning runs again.
        self.cache_file
            .as_ref()
            .filter(|p| crate::cache::check_file(p).unwrap_or(false))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    fn store(&self, all: &BTreeMap<String, Entry>) -> Result<()> {
        let Some(path) = &self.cache_file else {
            return Ok(());
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => std::path::Path::new("."),
        };
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
            Error::io(
                format!("autotune cache {}", path.display()),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"),
            )
        })?;
        crate::cache::ensure_private_dir(dir, "the autotune cache file's folder")?;
        let text = serde_json::to_string_pretty(all)
            .map_err(|e| Error::io(format!("autotune cache {}", path.display()), e.into()))?;
        crate::cache::write_atomic(dir, name, text.as_bytes())?;
        Ok(())
    }

    fn bar(&self, done: usize, what: &str) {
        if !self.progress {
            return;
        }
        let n = self.configs.len().max(1);
        let filled = done * 20 / n;
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r[tune {}] [{}{}] {done}/{n} {what:<40}",
            self.kernel.name(),
            "#".repeat(filled),
            "-".repeat(20 - filled)
        );
        if done == n {
            let _ = writeln!(err);
        }
        let _ = err.flush();
    }

    /// The fastest config for `key`: from the cache when it holds an entry for the same
    /// candidates, otherwise by running `run(config)` (which launches and returns the
    /// outputs) once to warm up and `reps` times timed, evaluating the outputs each time.
    /// Candidates that fail are skipped; if all fail, the first error is returned.
    pub fn tune(
        &self,
        key: &TuneKey,
        run: impl Fn(&Config) -> Result<Vec<Array>>,
    ) -> Result<Tuned> {
        if self.configs.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "autotune `{}`: no configs to choose from",
                self.kernel.name()
            )));
        }
        let entry_key = self.entry_key(key)?;
        let checksum = self.checksum();
        let mut cache = self.load();
        if let Some(e) = cache.get(&entry_key) {
            if e.checksum == checksum && self.configs.get(e.index) == Some(&e.config) {
                return Ok(Tuned {
                    config: e.config.clone(),
                    index: e.index,
                    timings: vec![None; self.configs.len()],
                    from_cache: true,
                });
            }
        }
        let mut timings = Vec::with_capacity(self.configs.len());
        let mut first_err = None;
        for (i, cfg) in self.configs.iter().enumerate() {
            self.bar(i, &cfg.to_string());
            match self.time(cfg, &run) {
                Ok(t) => timings.push(Some(t)),
                Err(e) => {
                    first_err.get_or_insert(e);
                    timings.push(None);
                }
            }
        }
        self.bar(self.configs.len(), "done");
        let best = timings
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .min_by_key(|(_, t)| *t)
            .map(|(i, _)| i);
        let Some(index) = best else {
            return Err(first_err.unwrap_or_else(|| {
                Error::InvalidArgument("autotune: every config failed".into())
            }));
        };
        let config = self.configs[index].clone();
        cache.insert(
            entry_key,
            Entry {
                checksum,
                index,
                config: config.clone(),
            },
        );
        self.store(&cache)?;
        Ok(Tuned {
            config,
            index,
            timings,
            from_cache: false,
        })
    }

    fn time(&self, cfg: &Config, run: &impl Fn(&Config) -> Result<Vec<Array>>) -> Result<Duration> {
        let once = || -> Result<Duration> {
            let t = Instant::now();
            let outs = run(cfg)?;
            let refs: Vec<&Array> = outs.iter().collect();
            Array::eval_all(&refs)?;
            Ok(t.elapsed())
        };
        once()?;
        let mut ts = (0..self.reps).map(|_| once()).collect::<Result<Vec<_>>>()?;
        ts.sort();
        Ok(ts[ts.len() / 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType::{F32, I32};
    use crate::runtime::{cdiv, grid, out_like, Target};
    use crate::tl;

    fn add() -> JitKernel {
        tl::jit("tune_add", |k| {
            let (x, y, o) = (k.ptr(F32, "x"), k.ptr(F32, "y"), k.ptr(F32, "o"));
            let n = k.scalar(I32, "n");
            let b = k.constexpr("BLOCK");
            let offs = tl::program_id(0) * b + tl::arange(0, b);
            let m = offs.lt(n);
            tl::store(
                o + offs,
                tl::load(x + offs).mask(m) + tl::load(y + offs).mask(m),
            )
            .mask(m);
        })
        .unwrap()
    }

    #[test]
    fn picks_caches_reloads_and_invalidates() {
        let k = add();
        let n = 5000usize;
        let x = crate::mlx::random::uniform(&[n], F32, 0.0, 1.0, 1).unwrap();
        let dir = std::env::temp_dir().join(format!("tm-tune-{}", std::process::id()));
        let file = dir.join("autotune.json");
        let _ = std::fs::remove_dir_all(&dir);
        // BLOCK = 3 is not a power of two: that candidate fails and is skipped.
        let configs: Vec<Config> = [3, 128, 1024]
            .iter()
            .map(|b| Config::new(&[("BLOCK", *b)], 4))
            .collect();
        let runs = std::cell::Cell::new(0);
        let run = |cfg: &Config| {
            runs.set(runs.get() + 1);
            cfg.apply(k.launch())
                .grid(grid(move |m| [cdiv(n, m["BLOCK"])]))
                .args((&x, &x, out_like(&x), n as i32))
                .target(Target::Cpu)
                .run()
        };
        let key = TuneKey::of(&[&x]);
        let tuner = Autotuner::new(&k, configs.clone())
            .cache_file(Some(file.clone()))
            .reps(2)
            .progress(false);
        let first = tuner.tune(&key, run).unwrap();
        assert!(!first.from_cache);
        assert!(first.timings[0].is_none() && first.index >= 1);
        assert!(file.exists());
        let measured_runs = runs.get();

        // Same candidates: read back from disk, nothing runs.
        let again = Autotuner::new(&k, configs.clone())
            .cache_file(Some(file.clone()))
            .progress(false)
            .tune(&key, run)
            .unwrap();
        assert!(again.from_cache);
        assert_eq!(again.config, first.config);
        assert_eq!(runs.get(), measured_runs);

        // A changed candidate list invalidates the entry.
        let mut more = configs;
        more.push(Config::new(&[("BLOCK", 512)], 4));
        let third = Autotuner::new(&k, more)
            .cache_file(Some(file))
            .reps(1)
            .progress(false)
            .tune(&key, run)
            .unwrap();
        assert!(!third.from_cache);
        assert!(runs.get() > measured_runs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn all_failing_configs_give_the_error() {
        let k = add();
        let x = crate::mlx::zeros(&[10], F32).unwrap();
        let e = Autotuner::new(&k, vec![Config::new(&[("BLOCK", 3)], 4)])
            .cache_file(None)
            .progress(false)
            .tune(&TuneKey::of(&[&x]), |cfg| {
                cfg.apply(k.launch())
                    .grid([1])
                    .args((&x, &x, out_like(&x), 10))
                    .run()
            })
            .unwrap_err();
        assert!(e.to_string().contains("power"), "{e}");
        let e = Autotuner::new(&k, vec![])
            .tune(&TuneKey::of(&[&x]), |_| Ok(vec![]))
            .unwrap_err();
        assert!(e.to_string().contains("no configs"), "{e}");
    }
}
