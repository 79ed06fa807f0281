//! The build script's MLX wheel check (`build/wheel.rs`): a download whose hash or name is
//! not pinned is refused, and the install cache never falls back to a shared temp folder.

#[path = "../build/wheel.rs"]
#[allow(dead_code)]
mod wheel;

use std::path::{Path, PathBuf};

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("build-script-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// SHA-256 of "abc" (FIPS 180-2, appendix B.1).
const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

#[test]
fn sha256_of_a_file_matches_the_standard_vector() {
    let dir = scratch("sha");
    let f = dir.join("abc.whl");
    std::fs::write(&f, b"abc").unwrap();
    assert_eq!(wheel::sha256_file(&f).unwrap(), ABC);
    // Longer than one read buffer.
    let big = dir.join("big.whl");
    std::fs::write(&big, vec![b'a'; 1_000_000]).unwrap();
    assert_eq!(
        wheel::sha256_file(&big).unwrap(),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    );
}

#[test]
fn a_wheel_with_the_pinned_name_and_hash_is_accepted() {
    let dir = scratch("ok");
    let f = dir.join("mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl");
    std::fs::write(&f, b"abc").unwrap();
    let pinned = [(
        "mlx-cpu",
        "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl",
        ABC,
    )];
    assert_eq!(wheel::verify_wheel("mlx-cpu", &f, &pinned).unwrap(), ABC);
}

#[test]
fn a_wheel_whose_hash_does_not_match_is_refused() {
    let dir = scratch("bad");
    // The real file name of the pinned x86-64 wheel, with other contents.
    let name = "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl";
    let f = dir.join(name);
    std::fs::write(&f, b"not the published wheel").unwrap();
    let pinned = wheel::candidates("mlx-cpu", "x86_64");
    let err = wheel::verify_wheel("mlx-cpu", &f, &pinned).unwrap_err();
    let got = wheel::sha256_file(&f).unwrap();
    assert!(err.contains(name), "{err}");
    assert!(err.contains(&got), "{err}");
    assert!(
        err.contains("0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee"),
        "{err}"
    );
    assert!(err.contains("refusing"), "{err}");
}

#[test]
fn a_wheel_that_is_not_pinned_is_refused() {
    let dir = scratch("unknown");
    let f = dir.join("mlx_cpu-0.32.4-py3-none-win_amd64.whl");
    std::fs::write(&f, b"abc").unwrap();
    // Even with a hash that some pinned file has: the name must match too.
    let pinned = [(
        "mlx-cpu",
        "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl",
        ABC,
    )];
    let err = wheel::verify_wheel("mlx-cpu", &f, &pinned).unwrap_err();
    assert!(err.contains("not one of the pinned"), "{err}");
    assert!(err.contains("manylinux_2_35_x86_64"), "{err}");
}

#[test]
fn the_pinned_table_is_well_formed() {
    let mut names = std::collections::HashSet::new();
    for (package, file, sha) in wheel::PINNED_WHEELS {
        assert!(names.insert(*file), "{file} listed twice");
        assert_eq!(sha.len(), 64, "{file}");
        assert!(sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert!(file.starts_with(&package.replace('-', "_")), "{file}");
        assert!(file.contains(wheel::MLX_VERSION), "{file}");
    }
    let files = |p, a| -> Vec<&str> { wheel::candidates(p, a).iter().map(|c| c.1).collect() };
    assert_eq!(
        files("mlx-cpu", "x86_64"),
        ["mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl"]
    );
    assert_eq!(
        files("mlx-cpu", "aarch64"),
        ["mlx_cpu-0.32.4-py3-none-manylinux_2_35_aarch64.whl"]
    );
    assert_eq!(files("mlx-metal", "aarch64").len(), 3);
    assert!(files("mlx-metal", "x86_64").is_empty());
    assert_eq!(wheel::package_for("linux"), Some("mlx-cpu"));
    assert_eq!(wheel::package_for("macos"), Some("mlx-metal"));
    assert_eq!(wheel::package_for("windows"), None);
}

#[test]
fn the_cache_never_falls_back_to_the_temp_folder() {
    let out = Path::new("/work/target/release/build/x/out");
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|p| p.0 == name).map(|p| p.1.to_string())
    };
    assert_eq!(
        wheel::cache_root(
            env(&[("TRITON_METAL_MLX_CACHE", "/c"), ("HOME", "/h")]),
            out
        ),
        PathBuf::from("/c")
    );
    assert_eq!(
        wheel::cache_root(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]), out),
        PathBuf::from("/x/triton-metal")
    );
    assert_eq!(
        wheel::cache_root(env(&[("HOME", "/h")]), out),
        PathBuf::from("/h/.cache/triton-metal")
    );
    // No home at all (and empty variables count as unset): the build's own OUT_DIR.
    let none = wheel::cache_root(env(&[("HOME", ""), ("TRITON_METAL_MLX_CACHE", "")]), out);
    assert_eq!(none, out.join("mlx-cache"));
    assert!(!none.starts_with(std::env::temp_dir()));
}

#[test]
fn install_folders_are_named_by_file_and_hash() {
    assert_eq!(
        wheel::install_dir_name("mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl", ABC),
        "mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64-ba7816bf8f01cfea"
    );
}

#[test]
fn library_folders_under_the_temp_folder_get_no_rpath() {
    let tmp = std::env::temp_dir();
    assert!(wheel::under_temp_dir(
        &tmp.join("triton-metal-cache/mlx/lib")
    ));
    assert!(wheel::under_temp_dir(&tmp));
    // The user's cache is fine.
    assert!(!wheel::under_temp_dir(Path::new(
        "/home/user/.cache/triton-metal"
    )));
}
