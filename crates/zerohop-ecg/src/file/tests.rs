use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use super::*;

/// A fresh file `name` of `len` bytes in a folder of this process's own.
fn scratch(name: &str, len: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zerohop-ecg-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, vec![b'7'; len]).unwrap();
    path
}

#[test]
fn a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer() {
    let path = scratch("fifo", 0);
    std::fs::remove_file(&path).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let (done, result) = mpsc::channel();
    let p = path.clone();
    // A blocking open would never return: the answer must come on the channel in time.
    std::thread::spawn(move || done.send(read_whole(&p, "CSV").map(|b| b.len())));
    let err = result
        .recv_timeout(Duration::from_secs(30))
        .expect("opening a FIFO blocked")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fifo: a FIFO (named pipe), not a regular file"),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_link_to_a_device_or_a_folder_is_refused_by_what_it_opens() {
    let link = scratch("zero", 0);
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let err = read_prefix(&link, "WFDB signal file", 1 << 40)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid WFDB signal file: ")
            && err.ends_with("zero: a character device, not a regular file"),
        "{err}"
    );
    let err = read_whole(link.parent().unwrap(), "CSV")
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("a folder, not a regular file"), "{err}");
    std::fs::remove_file(&link).unwrap();
}

#[test]
fn reads_stop_at_the_limit_and_small_files_stay_small() {
    let path = scratch("limit", 1000);
    assert_eq!(read_prefix(&path, "x", 10).unwrap().len(), 10);
    assert_eq!(read_prefix(&path, "x", 5000).unwrap().len(), 1000);
    assert_eq!(read_small(&path, "header", 1000).unwrap().len(), 1000);
    let err = read_small(&path, "header", 999).unwrap_err().to_string();
    assert!(err.contains("limit: more than 999 bytes"), "{err}");
}

#[test]
fn a_file_truncated_while_it_is_read_is_an_error_naming_it() {
    let len = CHUNK * 2 + 100;
    let path = scratch("shrinks", len);
    let mut calls = 0;
    let err = read_with(&path, "CSV", u64::MAX, &mut |so_far| {
        calls += 1;
        if calls == 1 {
            assert_eq!(so_far, CHUNK);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(10)
                .unwrap();
        }
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("shrinks: the file changed while it was read")
            && text.contains(&format!("it had {len} bytes, then ended after {CHUNK}")),
        "{text}"
    );
    assert!(matches!(err, EcgError::Io { .. }));
}

#[test]
fn a_file_that_grows_while_it_is_read_is_an_error_too() {
    let path = scratch("grows", CHUNK + 1);
    let err = read_with(&path, "CSV", u64::MAX, &mut |_| {
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"8\n").unwrap();
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("changed while it was read: it had"), "{err}");
    // Read up to a limit below its length, what comes after is none of the reader's business.
    let path = scratch("grows-past", 100);
    let bytes = read_with(&path, "x", 50, &mut |_| {
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"8").unwrap();
    })
    .unwrap();
    assert_eq!(bytes.len(), 50);
}
