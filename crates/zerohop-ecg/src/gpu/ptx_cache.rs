//! The kernels' PTX cached on disk, so only a machine's first process pays for NVRTC (about
//! half a second). The key covers everything the PTX depends on: the source, the compile
//! options and the NVRTC version. Files are written to a temporary name and renamed, so
//! concurrent processes never read half a file; a cache that cannot be read or written is
//! skipped, never an error.

use std::path::{Path, PathBuf};

use cudarc::nvrtc;

/// The folder: `$ZEROHOP_CACHE_DIR`, else `$XDG_CACHE_HOME/zerohop`, else `~/.cache/zerohop`.
pub fn folder() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ZEROHOP_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(Path::new(&dir).join("zerohop"));
    }
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache").join("zerohop"))
}

/// FNV-1a over the parts, each followed by a separator: stable across runs and builds.
fn fingerprint(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &byte in part.iter().chain(&[0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; NVRTC is loaded (the caller checked it is present).
    let _ = unsafe { nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

/// Where the PTX for `source` compiled with `options` lives.
pub fn path(source: &str, options: &[String]) -> Option<PathBuf> {
    let (major, minor) = nvrtc_version();
    let version = format!("nvrtc {major}.{minor}");
    let mut parts: Vec<&[u8]> = vec![source.as_bytes(), version.as_bytes()];
    parts.extend(options.iter().map(|o| o.as_bytes()));
    Some(folder()?.join(format!("kernels-{:016x}.ptx", fingerprint(&parts))))
}

/// The cached PTX, if there is one.
pub fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .filter(|ptx| !ptx.is_empty())
}

/// Stores `ptx` (best effort).
pub fn write(path: &Path, ptx: &str) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let temporary = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("kernels"),
        std::process::id()
    ));
    if std::fs::write(&temporary, ptx).is_ok() && std::fs::rename(&temporary, path).is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_changes_with_every_input() {
        let a = fingerprint(&[b"source", b"nvrtc 13.0", b"--fmad=false"]);
        assert_eq!(a, fingerprint(&[b"source", b"nvrtc 13.0", b"--fmad=false"]));
        assert_ne!(
            a,
            fingerprint(&[b"source!", b"nvrtc 13.0", b"--fmad=false"])
        );
        assert_ne!(a, fingerprint(&[b"source", b"nvrtc 13.1", b"--fmad=false"]));
        // The separator keeps parts from running into each other.
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
    }

    #[test]
    fn files_are_written_whole_and_read_back() {
        let dir = std::env::temp_dir().join(format!("zerohop-ptx-{}", std::process::id()));
        let path = dir.join("kernels-test.ptx");
        assert_eq!(read(&path), None);
        write(&path, ".version 8.0\n");
        assert_eq!(read(&path).as_deref(), Some(".version 8.0\n"));
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .collect();
        assert!(leftovers.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
