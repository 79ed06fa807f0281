//! Hostile input to the `triton-metal` tool, each invocation its own process: every case
//! must end with exit code 0, 1 or 2 and at most one line on stderr, never a signal or a
//! panic.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn cli() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_triton-metal"));
    c.env_remove("TRITON_METAL_HW");
    c.env_remove("TRITON_METAL_REQUIRE_EMU");
    c
}

fn no_panic(o: &Output, what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code().is_some(),
        "{what}: killed by a signal ({:?})",
        o.status
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(
        err.lines().count() <= 1,
        "{what}: more than one line on stderr:\n{err}"
    );
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tm-hostile-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn op_ids_longer_than_a_format_width_are_printed() {
    let id = "x".repeat(70_000);
    let spec =
        format!(r#"{{"ops": [{{"type": "tt.add", "id": "{id}", "input_shapes": [[8], [8]]}}]}}"#);
    let f = scratch("long-id.json");
    std::fs::write(&f, spec).unwrap();
    for cmd in ["analyze", "layouts"] {
        let o = cli()
            .args([cmd, "--json", f.to_str().unwrap()])
            .output()
            .unwrap();
        no_panic(&o, cmd);
        assert!(
            o.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(String::from_utf8_lossy(&o.stdout).contains(&id));
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_stdout_is_one_line_and_exit_1() {
    for args in [
        &["profiles"][..],
        &["sample-ops", "--large"],
        &["check-system"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = cli().args(args).stdout(full).output().unwrap();
        no_panic(&o, &format!("{args:?}"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("cannot write to standard output"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [
        &["profiles"][..],
        &["sample-ops", "--large"],
        &["analyze", "--operation", "tt.sum:[64,64]:1"],
    ] {
        let mut c = cli()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // What `| head -c1` does: read one byte, then close the pipe.
        let mut out = c.stdout.take().unwrap();
        let mut one = [0u8; 1];
        let _ = out.read(&mut one);
        drop(out);
        let mut err = String::new();
        c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = c.wait().unwrap();
        assert!(status.code().is_some(), "{args:?}: signal {status:?}");
        assert!(
            !err.contains("panicked") && !err.contains("error"),
            "{args:?}: {err}"
        );
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn bench_reductions_checks_its_arguments_before_running() {
    let bad = [
        (
            vec!["--output", "/nonexistent-dir/plot.png"],
            "/nonexistent-dir/plot.png",
        ),
        (vec!["--output", "/tmp"], "is a directory"),
        (vec!["--output", "plot.txt"], "ending in .png"),
        (vec!["--reps", "-1"], "--reps -1"),
        (vec!["--reps=-5"], "--reps -5"),
        (vec!["--num-warps", "-4"], "--num_warps -4"),
    ];
    for (args, want) in bad {
        let t = Instant::now();
        // A size that would take minutes: the check must come first.
        let o = cli()
            .args([
                "bench-reductions",
                "--sizes",
                "8192x8192",
                "--target",
                "cpu",
            ])
            .args(&args)
            .output()
            .unwrap();
        no_panic(&o, &format!("{args:?}"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("ImageError"),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?} ran the benchmark");
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{args:?} took {:?}",
            t.elapsed()
        );
    }
    assert!(!std::path::Path::new("/nonexistent-dir").exists());
}

#[test]
fn fuse_verify_on_an_oversized_input_is_an_error() {
    let spec = r#"{"inputs": [{"id": "x", "shape": [100000, 100000]}],
                   "ops": [{"type": "tt.exp", "id": "y", "inputs": ["x"]}]}"#;
    let f = scratch("huge.json");
    std::fs::write(&f, spec).unwrap();
    let o = cli()
        .args(["fuse", "--json", f.to_str().unwrap(), "--verify"])
        .output()
        .unwrap();
    no_panic(&o, "fuse --verify");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("100000, 100000") && err.contains("bytes"),
        "{err}"
    );
}
