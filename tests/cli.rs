//! The `triton-metal` binary run as a process: every subcommand's output, and bad input
//! rejected with one line on stderr and exit code 2.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_triton-metal"));
    // Tests must not depend on the developer's (or CI's) settings.
    c.env_remove("TRITON_METAL_HW");
    c.env_remove("TRITON_METAL_REQUIRE_EMU");
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "{args:?}: {}\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

fn json(args: &[&str]) -> Value {
    let out = ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

/// Exit code 2 and exactly one line on stderr containing `needle`.
fn rejected(args: &[&str], needle: &str) {
    let o = run(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

fn tmp(name: &str, content: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("triton-metal-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

const SEED_OPS: &str = r#"{
  "ops": [
    {"type": "tt.reduce", "id": "sum_reduce_1d", "input_shapes": [[1024]], "args": {"axis": 0}},
    {"type": "tt.sum", "id": "sum_reduce_2d", "input_shapes": [[512, 512]], "args": {"axis": 1}},
    {"type": "tt.matmul", "id": "mm", "input_shapes": [[64, 32], [32, 16]], "args": {}}
  ]
}"#;

#[test]
fn analyze_a_seed_file_and_one_operation() {
    let f = tmp("seed.json", SEED_OPS);
    let out = ok(&["analyze", "--json", f.to_str().unwrap()]);
    assert!(out.contains("sum_reduce_1d  tt.reduce  [1024]"), "{out}");
    assert!(out.contains("COALESCED (8)"), "{out}");
    // The reductions lower to the DSL reduce kernel; a lone matmul stays MLX's.
    assert!(out.contains("dsl:fused_reduce"), "{out}");
    let mm = out.lines().find(|l| l.starts_with("mm ")).unwrap();
    assert!(mm.contains("mlx:tt.dot") && mm.ends_with("no"), "{mm}");
    assert!(out.contains("2 of 3 ops use the COALESCED layout"), "{out}");

    let out = ok(&[
        "analyze",
        "--operation",
        "tt.reduce:[1024,512]:1",
        "--verbose",
    ]);
    assert!(out.contains("COALESCED"), "{out}");
    assert!(out.contains("threads"), "{out}");

    let v = json(&[
        "--format",
        "json",
        "analyze",
        "--operation",
        "tt.sum:[4096,4096]:1",
    ]);
    assert_eq!(v["ops"][0]["layout_value"], 8);
    assert_eq!(v["ops"][0]["coalesced"], true);
    assert_eq!(v["ops"][0]["runs_as"], "dsl");
    assert_eq!(v["summary"]["coalesced"], 1);

    // --output writes the same JSON document.
    let outp = std::env::temp_dir().join(format!("tm-analyze-{}.json", std::process::id()));
    ok(&[
        "analyze",
        "--json",
        f.to_str().unwrap(),
        "--output",
        outp.to_str().unwrap(),
    ]);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&outp).unwrap()).unwrap();
    assert_eq!(written["ops"].as_array().unwrap().len(), 3);
    let _ = std::fs::remove_file(outp);
}

#[test]
fn version_on_the_subcommand() {
    let out = ok(&["analyze", "--version"]);
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
}

#[test]
fn layouts_follow_the_chosen_hardware() {
    let launches = |hw: &str| {
        let v = json(&[
            "--hw",
            hw,
            "--format",
            "json",
            "layouts",
            "--operation",
            "tt.sum:[16,65536]:1",
        ]);
        assert_eq!(v["hardware"]["chip"], hw);
        v["ops"][0]["launches"].as_array().unwrap().clone()
    };
    // A row of 65536 runs as partials per program, then a final pass; the split follows the
    // profile's vector width (16-byte vectors on M1 and sm90, 32-byte on the CPU profile).
    let (m1, sm90, cpu) = (launches("m1"), launches("sm90"), launches("cpu"));
    for l in [&m1, &sm90, &cpu] {
        let stages: Vec<&str> = l.iter().map(|x| x["stage"].as_str().unwrap()).collect();
        assert_eq!(stages, ["partials", "final"]);
        assert_eq!(l[1]["grid"], serde_json::json!([16, 1, 1]));
        for x in l.iter() {
            // The plan the printer uses for the kernel launched, as `layouts --ir` prints it.
            let plan = x["plan"].as_str().unwrap();
            assert!(plan.starts_with(&format!("plan @{}", x["kernel"].as_str().unwrap())));
            assert!(plan.contains("reduce COALESCED"), "{plan}");
            assert_eq!(x["threads"], 128);
        }
    }
    assert_eq!(m1[0]["grid"], serde_json::json!([16, 4, 1]));
    assert_eq!(sm90[0]["grid"], serde_json::json!([16, 4, 1]));
    assert_eq!(cpu[0]["grid"], serde_json::json!([16, 2, 1]));
    assert_eq!(m1[0]["vec"], 4);
    assert_eq!(cpu[0]["vec"], 8);
    // The environment variable works too, and --hw wins over it.
    let o = bin()
        .env("TRITON_METAL_HW", "m4-max")
        .args(["layouts"])
        .output()
        .unwrap();
    assert!(
        stdout(&o).starts_with("hardware: Apple M4 Max (m4-max)"),
        "{}",
        stdout(&o)
    );
    let table = ok(&["--hw", "m3", "layouts"]);
    assert!(table.contains("TWO-STAGE"), "{table}");
    let softmax = table
        .lines()
        .find(|l| l.starts_with("softmax_rows"))
        .unwrap();
    assert!(
        softmax.contains("fused_softmax") && softmax.contains("[128x1x1]"),
        "{softmax}"
    );
    let min = table.lines().find(|l| l.starts_with("min_rows")).unwrap();
    assert!(
        min.contains("partials") && min.contains("[128x2x1]"),
        "{min}"
    );
}

#[test]
fn sample_ops_round_trip_through_analyze() {
    let small: Value = serde_json::from_str(&ok(&["sample-ops"])).unwrap();
    let large: Value = serde_json::from_str(&ok(&["sample-ops", "--large"])).unwrap();
    let n_small = small["ops"].as_array().unwrap().len();
    assert!(large["ops"].as_array().unwrap().len() > n_small);
    let f = std::env::temp_dir().join(format!("tm-large-{}.json", std::process::id()));
    ok(&["sample-ops", "--large", "--output", f.to_str().unwrap()]);
    let out = ok(&["analyze", "--json", f.to_str().unwrap()]);
    assert!(out.contains("sum_16x65536_axis1"), "{out}");
    let _ = std::fs::remove_file(f);
}

#[test]
fn fuse_the_sample_graph_and_verify_it() {
    let f = std::env::temp_dir().join(format!("tm-graph-{}.json", std::process::id()));
    ok(&["sample-ops", "--graph", "--output", f.to_str().unwrap()]);
    let out = ok(&["fuse", "--json", f.to_str().unwrap(), "--verify"]);
    for p in [
        "layer_norm",
        "attention",
        "fma",
        "matmul_bias",
        "rms_norm",
        "swiglu",
        "hierarchical_reduction",
    ] {
        assert!(out.contains(p), "{p}: {out}");
    }
    assert!(out.contains("memory traffic saved"), "{out}");
    assert!(out.contains("verification"), "{out}");
    // Which kernel ran each group: DSL kernels, MLX's fused attention as the fallback.
    let ran = out.split("KERNEL THAT RAN").nth(1).unwrap();
    let row = |g: &str| ran.lines().find(|l| l.starts_with(g)).unwrap().to_string();
    assert!(row("h0").contains("dsl:fused_layer_norm"), "{out}");
    assert!(row("attn").contains("mlx (no DSL kernel)"), "{out}");
    assert!(row("energy").contains("dsl:fused_reduce"), "{out}");
    let mut targets = vec!["cpu"];
    if triton_metal::emu::Emulator::should_run("cli_fuse_verify").unwrap() {
        targets.extend(["cpu-compiled", "emulated"]);
    }
    for target in targets {
        let v = json(&[
            "--hw",
            "m1",
            "--format",
            "json",
            "fuse",
            "--json",
            f.to_str().unwrap(),
            "--verify",
            "--target",
            target,
        ]);
        assert_eq!(v["target"], target);
        assert_eq!(v["summary"]["groups"].as_array().unwrap().len(), 7);
        assert!(v["summary"]["bytes_saved"].as_u64().unwrap() > 0);
        for o in v["verification"]["outputs"].as_array().unwrap() {
            assert_eq!(o["mismatches"], 0, "{target}: {o}");
        }
        // The launches that ran are the ones planned before running.
        let planned = v["kernels"].as_array().unwrap();
        let ran = v["verification"]["kernels"].as_array().unwrap();
        assert_eq!(planned.len(), 7);
        for (p, r) in planned.iter().zip(ran) {
            assert_eq!(p["group"], r["group"]);
            assert_eq!(p["kernel"], r["kernel"]);
            assert_eq!(p["launches"], r["launches"], "{target}: {p}");
        }
        let dsl = ran
            .iter()
            .filter(|r| r["launches"] != serde_json::json!([]))
            .count();
        assert_eq!(dsl, 6, "{target}");
    }
    // `layouts --fused` reports each node of the fused graph with its kernels' plans.
    let v = json(&[
        "--hw",
        "m2",
        "--format",
        "json",
        "layouts",
        "--fused",
        "--json",
        f.to_str().unwrap(),
    ]);
    assert_eq!(v["fused"], true);
    let ops = v["ops"].as_array().unwrap();
    let node = |id: &str| ops.iter().find(|o| o["id"] == id).unwrap().clone();
    let energy = node("energy");
    assert_eq!(energy["type"], "hierarchical_reduction");
    assert_eq!(energy["runs_as"], "dsl");
    assert_eq!(energy["layout"], "COALESCED");
    let l = &energy["launches"][0];
    assert_eq!(l["stage"], "reduce");
    assert!(
        l["plan"].as_str().unwrap().contains("reduce COALESCED"),
        "{l}"
    );
    assert_eq!(node("attn")["runs_as"], "mlx");
    assert_eq!(node("q")["kernel"], "mlx:tt.dot");
    let table = ok(&["layouts", "--fused", "--json", f.to_str().unwrap()]);
    assert!(
        table.contains("of 13 nodes use the COALESCED layout"),
        "{table}"
    );
    let _ = std::fs::remove_file(f);
}

#[test]
fn profiles_and_check_system() {
    let out = ok(&["profiles"]);
    for name in [
        "m1", "m2-pro", "m3-max", "m4-max", "apple", "sm80", "sm90", "cpu",
    ] {
        assert!(out.contains(name), "{name}: {out}");
    }
    assert!(
        out.contains("546"),
        "M4 Max bandwidth from DESIGN.md: {out}"
    );
    let out = ok(&["check-system"]);
    for k in [
        "os",
        "mlx",
        "backend",
        "device",
        "chip generation",
        "metal",
        "cuda",
        "emulation harness",
        "compiled cpu executor",
    ] {
        assert!(out.contains(k), "{k}: {out}");
    }
    let v = json(&["--format", "json", "check-system"]);
    assert_eq!(v["ok"], true);
    assert_eq!(v["compiled_cpu_executor"], v["emulation_harness"]);
    assert_eq!(json(&["check-system", "--json"])["ok"], true);
    assert_eq!(json(&["profiles", "--json"]).as_array().unwrap().len(), 16);
    assert!(v["mlx_version"].as_str().unwrap().starts_with("0."));
    // A missing required harness fails with exit code 1.
    let o = bin()
        .env("PATH", "/nonexistent")
        .args(["check-system", "--require-emu"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("missing: emulation harness"),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("compiled cpu executor") && stdout(&o).contains("needs clang++"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let bad_json = tmp("bad.json", "{\"ops\": [ {\"type\": \"tt.sum\", ");
    rejected(
        &["analyze", "--json", bad_json.to_str().unwrap()],
        "malformed op-graph JSON",
    );
    let unknown = tmp(
        "unknown.json",
        r#"{"ops":[{"type":"tt.frobnicate","id":"f","input_shapes":[[4]]}]}"#,
    );
    rejected(
        &["analyze", "--json", unknown.to_str().unwrap()],
        "op `f` (tt.frobnicate): type: unknown op type",
    );
    rejected(
        &["fuse", "--json", unknown.to_str().unwrap()],
        "unknown op type",
    );
    let dangling = tmp(
        "dangling.json",
        r#"{"inputs":[{"id":"x","shape":[4]}],"ops":[{"type":"tt.exp","id":"e","inputs":["y"]}]}"#,
    );
    rejected(
        &["fuse", "--json", dangling.to_str().unwrap()],
        "inputs[0]: `y` is not a graph input",
    );
    rejected(
        &["analyze", "--operation", "tt.sum:[4,x]:1"],
        "bad operation",
    );
    rejected(
        &["analyze", "--operation", "tt.sum:[4,4"],
        "unbalanced brackets",
    );
    rejected(
        &["analyze", "--operation", "tt.sum:[4,-4]:1"],
        "dimension must be",
    );
    rejected(
        &["analyze", "--operation", "tt.sum:[4,4]:7"],
        "args.axis: axis 7 is out of range",
    );
    rejected(
        &["analyze", "--json", "/nonexistent/ops.json"],
        "cannot read",
    );
    rejected(&["analyze"], "nothing to analyze");
    rejected(&["--hw", "m9", "layouts"], "unknown hardware `m9`");
    let o = bin()
        .env("TRITON_METAL_HW", "pentium")
        .args(["layouts"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("TRITON_METAL_HW: unknown hardware `pentium`; valid names: m1,"),
        "{}",
        stderr(&o)
    );
    rejected(&["analyze", "--frobnicate"], "--frobnicate");
    rejected(
        &["fuse", "--json", "g.json", "--verify", "--target", "tpu"],
        "tpu",
    );
    rejected(
        &["fuse", "--json", "g.json", "--verify", "--rtol", "nan"],
        "--rtol NaN: expected a finite tolerance >= 0",
    );
    rejected(&["frobnicate"], "frobnicate");
}

#[test]
fn bench_reductions_table_json_and_png() {
    let png =
        std::env::temp_dir().join(format!("triton-metal-cli-{}-bench.png", std::process::id()));
    let png_arg = png.to_str().unwrap();
    let o = run(&[
        "bench-reductions",
        "--sizes",
        "4x100,3x33",
        "--layouts",
        "DEFAULT,ROW_MAJOR,COALESCED",
        "--dtype",
        "float16",
        "--reps",
        "2",
        "--output",
        png_arg,
    ]);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let table = stdout(&o);
    // Two sizes x three layouts, in the order given.
    let rows: Vec<&str> = table.lines().filter(|l| l.contains("float16")).collect();
    assert_eq!(rows.len(), 6, "{table}");
    for (row, (size, layout)) in rows.iter().zip([
        ("4x100", "DEFAULT"),
        ("4x100", "ROW_MAJOR"),
        ("4x100", "COALESCED"),
        ("3x33", "DEFAULT"),
        ("3x33", "ROW_MAJOR"),
        ("3x33", "COALESCED"),
    ]) {
        assert!(row.starts_with(size) && row.contains(layout), "{row}");
        assert!(row.trim_end().ends_with("yes"), "{row}");
    }
    for col in [
        "size", "layout", "dtype", "target", "median", "GB/s", "max err",
    ] {
        assert!(table.contains(col), "{col}: {table}");
    }
    if cfg!(target_os = "linux") {
        assert!(table.contains("ran on the CPU executor"), "{table}");
        assert!(rows.iter().all(|r| r.contains("cpu-executor")), "{table}");
    }
    let bytes = std::fs::read(&png).expect("the PNG was written");
    std::fs::remove_file(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 960);
    assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), 540);

    let v = json(&[
        "bench-reductions",
        "--sizes",
        "2x5",
        "--layouts",
        "tiled,column_major",
        "--reps",
        "1",
        "--json",
    ]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["layout"], "TILED");
    assert_eq!(rows[1]["layout"], "COLUMN_MAJOR");
    for r in rows {
        assert_eq!((r["rows"].as_u64(), r["cols"].as_u64()), (Some(2), Some(5)));
        assert_eq!(r["dtype"], "float32");
        assert!(r["median_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["gb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["max_abs_err"].as_f64().unwrap() <= r["tolerance"].as_f64().unwrap());
        assert_eq!(r["ok"], true);
    }
    if cfg!(target_os = "linux") {
        assert_eq!(v["target"], "cpu-executor");
        assert!(
            v["notes"][0].as_str().unwrap().contains("CPU executor"),
            "{v}"
        );
    }
}

#[test]
fn bench_reductions_emulated_says_timings_mean_nothing() {
    let o = run(&[
        "bench-reductions",
        "--target",
        "emulated",
        "--sizes",
        "2x40",
        "--layouts",
        "TILED",
        "--reps",
        "1",
        "--num-warps",
        "1",
    ]);
    if !o.status.success() && stderr(&o).contains("clang") {
        let required =
            std::env::var("TRITON_METAL_REQUIRE_EMU").is_ok_and(|v| !v.is_empty() && v != "0");
        assert!(!required, "TRITON_METAL_REQUIRE_EMU is set: {}", stderr(&o));
        eprintln!("skipped: no clang for the emulation harness");
        return;
    }
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("emulated-metal") && out.contains("say nothing about GPU speed"),
        "{out}"
    );
}

#[test]
fn bench_reductions_bad_input_is_one_line_and_exit_2() {
    rejected(
        &["bench-reductions", "--sizes", "128by1024"],
        "--sizes: `128by1024`",
    );
    rejected(&["bench-reductions", "--sizes", "0x16"], "--sizes");
    rejected(
        &["bench-reductions", "--layouts", "DEFAULT,ZIGZAG"],
        "`ZIGZAG`",
    );
    rejected(
        &["bench-reductions", "--dtype", "int8"],
        "--dtype: unsupported dtype `int8`",
    );
    rejected(&["bench-reductions", "--target", "tpu"], "tpu");
    rejected(
        &["bench-reductions", "--sizes", "2x2", "--reps", "0"],
        "reps",
    );
    rejected(
        &["bench-reductions", "--sizes", "2x2", "--num-warps", "3"],
        "num_warps",
    );
}

#[test]
fn layouts_of_a_kernel_ir_are_the_plan_the_printer_uses() {
    use triton_metal::codegen::{self, LaunchOptions};
    use triton_metal::opt::HardwareProfile;
    use triton_metal::tl;
    use triton_metal::DType::{F16, F32, I32};
    let kernel = tl::jit("mm", |k| {
        let (a, b, c) = (k.ptr(F16, "a"), k.ptr(F16, "b"), k.ptr(F32, "c"));
        let kk = k.scalar(I32, "K");
        let offs = tl::arange(0, 64);
        let acc = tl::zeros([64, 64], F32);
        let acc: tl::Tensor = tl::range(0, kk, 64).fold(acc, |k0, acc| {
            let at = tl::load(a + offs.col() * 64 + offs.row() + k0);
            let bt = tl::load(b + offs.col() * 64 + offs.row() + k0);
            tl::dot(at, bt, acc)
        });
        tl::store(c + offs.col() * 64 + offs.row(), acc.max(1).sum(0));
    })
    .unwrap()
    .specialize_with(&[])
    .unwrap();
    let f = tmp("mm.ir", &kernel.ir());
    for (hw, warps) in [("m1", 4), ("m3-max", 8), ("sm90", 4)] {
        let profile = HardwareProfile::named(hw).unwrap();
        let opts = LaunchOptions::default()
            .num_warps(warps)
            .target(profile.clone());
        let (plan, layouts) = if hw == "sm90" {
            let p = codegen::cuda::compile(&kernel, &opts).unwrap();
            (codegen::cuda::plan(&kernel, &opts), p.layouts)
        } else {
            let p = codegen::metal::compile(&kernel, &opts).unwrap();
            (codegen::metal::plan(&kernel, &opts), p.layouts)
        };
        let w = warps.to_string();
        let args = [
            "layouts",
            "--ir",
            f.to_str().unwrap(),
            "--hw",
            hw,
            "--num-warps",
            &w,
        ];
        let j = json(&[&args[..], &["--format", "json"]].concat());
        assert_eq!(j["plan"].as_str().unwrap(), plan.to_string());
        assert_eq!(j["vec"].as_u64().unwrap() as usize, plan.vec);
        let ds = j["decisions"].as_array().unwrap();
        assert_eq!(ds.len(), plan.decisions().count());
        for (d, (op, want, why)) in ds.iter().zip(plan.decisions()) {
            assert_eq!(d["op"], op.to_string());
            assert_eq!(d["decision"], want.to_string());
            assert_eq!(d["why"], why);
        }
        // What the emitted code reports agrees with the plan's dot and reductions.
        let dot = ds
            .iter()
            .find(|d| d["decision"].as_str().unwrap().starts_with("dot"))
            .unwrap();
        let printed = layouts.iter().find(|l| l.op.starts_with("dot")).unwrap();
        match dot["decision"].as_str().unwrap() {
            "dot simdgroup stage=f16" => {
                assert!(printed.layout.contains("staged as half"), "{printed:?}")
            }
            d if d.starts_with("dot mma") => {
                // On sm_90 a dot reading both operands from the loop's ring is `wgmma`.
                let unit = if plan.to_string().contains(" wgmma ;") {
                    "wgmma"
                } else {
                    "mma.sync"
                };
                assert!(printed.layout.starts_with(unit), "{printed:?}")
            }
            d => panic!("{hw}: unexpected {d}"),
        }
        let reduces: Vec<&str> = layouts
            .iter()
            .filter(|l| l.op.starts_with("reduce"))
            .map(|l| l.layout.split(':').next().unwrap())
            .collect();
        let planned: Vec<String> = ds
            .iter()
            .filter_map(|d| {
                d["decision"]
                    .as_str()
                    .unwrap()
                    .strip_prefix("reduce ")
                    .map(String::from)
            })
            .collect();
        assert_eq!(reduces, planned, "{hw}");
        // Every block load's layout, as the printer spelled it, is the one the report gives
        // a value of its type; the loop's accumulator is reported in the dot's fragments.
        let values = j["values"].as_array().unwrap();
        for l in layouts.iter().filter(|l| l.layout.starts_with("blocked: ")) {
            let ty = l.op.split(": ").nth(1).unwrap();
            let nums: Vec<&str> = l
                .layout
                .split(|c: char| !c.is_ascii_digit())
                .filter(|t| !t.is_empty())
                .collect();
            let want = format!(
                "blocked<vec={} threads={} regs={}>",
                nums[0], nums[1], nums[2]
            );
            assert!(
                values
                    .iter()
                    .any(|v| v["type"] == ty && v["layout"] == want.as_str()),
                "{hw}: {l:?} not among {values:?}"
            );
        }
        let frags = if hw == "sm90" {
            "fragments<dot mma"
        } else {
            "fragments<dot simdgroup"
        };
        assert!(
            values
                .iter()
                .any(|v| v["layout"].as_str().unwrap().starts_with(frags)),
            "{hw}: {values:?}"
        );
        let table = ok(&args);
        assert!(table.contains(&plan.to_string()), "{table}");
        assert!(table.contains("values @mm"), "{table}");
    }
}
