use super::*;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tm-cache-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn keys_are_sha256_with_length_prefixes() {
    // SHA-256 of the empty input: no parts hash nothing.
    assert_eq!(
        hash_key(&[]),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(hash_key(&[b"a", b"b"]), hash_key(&[b"a", b"b"]));
    assert_ne!(hash_key(&[b"ab"]), hash_key(&[b"a", b"b"]));
    assert_ne!(hash_key(&[b"a", b""]), hash_key(&[b"", b"a"]));
    assert_eq!(hash_key(&[b"x"]).len(), 64);
    assert!(!cpu_identity().is_empty());
}

#[test]
fn written_files_are_whole_private_and_trusted() {
    let d = scratch("write");
    ensure_private_dir(&d, "test").unwrap();
    let p = write_atomic(&d, "a.txt", b"first").unwrap();
    let p2 = write_atomic(&d, "a.txt", b"second").unwrap();
    assert_eq!(p, p2);
    assert_eq!(std::fs::read(&p).unwrap(), b"second");
    assert!(check_file(&p).unwrap());
    assert!(!check_file(&d.join("absent")).unwrap());
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("a.txt")]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
    }
    // Writing into a folder that does not exist names the file.
    let e = write_atomic(&d.join("nope"), "b.txt", b"x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope/b.txt"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

#[cfg(unix)]
mod unix {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn chown_nobody(p: &Path) -> bool {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; fails (and we skip) unless we are root.
        unsafe { libc::lchown(c.as_ptr(), 65534, 65534) == 0 }
    }

    #[test]
    fn directories_are_created_0700_with_parents() {
        let d = scratch("mk");
        let leaf = d.join("a").join("b");
        ensure_private_dir(&leaf, "test").unwrap();
        for p in [&d, &d.join("a"), &leaf] {
            assert_eq!(std::fs::metadata(p).unwrap().mode() & 0o777, 0o700, "{p:?}");
        }
        // Idempotent.
        ensure_private_dir(&leaf, "test").unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let d = scratch("open");
        std::fs::create_dir_all(&d).unwrap();
        for mode in [0o777, 0o770, 0o722, 0o1777] {
            chmod(&d, mode);
            let e = ensure_private_dir(&d, "$TRITON_METAL_CACHE_DIR")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&d.display().to_string())
                    && e.contains("TRITON_METAL_CACHE_DIR")
                    && e.contains("refusing"),
                "{e}"
            );
        }
        chmod(&d, 0o755);
        ensure_private_dir(&d, "test").unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        let d = scratch("owner");
        std::fs::create_dir_all(&d).unwrap();
        chmod(&d, 0o700);
        if !chown_nobody(&d) {
            eprintln!("skipped: changing owners needs root");
            return;
        }
        let e = ensure_private_dir(&d, "test").unwrap_err().to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn planted_files_are_refused() {
        let d = scratch("plant");
        ensure_private_dir(&d, "test").unwrap();
        let f = d.join("k.so");
        std::fs::write(&f, b"planted").unwrap();
        chmod(&f, 0o666);
        let e = check_file(&f).unwrap_err().to_string();
        assert!(e.contains("k.so") && e.contains("mode 666"), "{e}");
        chmod(&f, 0o620);
        assert!(check_file(&f).is_err());
        chmod(&f, 0o644);
        assert!(check_file(&f).unwrap());
        if chown_nobody(&f) {
            let e = check_file(&f).unwrap_err().to_string();
            assert!(e.contains("owned by uid 65534"), "{e}");
        }
        // A symlink (even to a good file) and a directory are not regular files.
        let good = write_atomic(&d, "good.so", b"x").unwrap();
        let link = d.join("link.so");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(check_file(&link)
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        std::fs::create_dir(d.join("dir.so")).unwrap();
        assert!(check_file(&d.join("dir.so")).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
