//! Files that are not what their names say: a signal file that is a device, a FIFO or far
//! longer than its header announces, a header or CSV that is a FIFO. Each is a clear error
//! naming the file (or, for the long file, a record of the announced length), never a hang
//! or a process that grows until it is killed.

use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use zerohop_ecg::csv::{read_csv, read_header as read_csv_header, CsvOptions};
use zerohop_ecg::wfdb::{read_annotations, read_header, read_record};

/// A fresh folder of this test's own.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zerohop-hostile-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The error text of `read`, which must answer within 30 s (a blocked open never does).
fn error_in_time<T: Send + 'static>(
    read: impl FnOnce() -> zerohop_ecg::Result<T> + Send + 'static,
) -> String {
    let (done, answer) = mpsc::channel();
    std::thread::spawn(move || done.send(read().err().map(|e| e.to_string())));
    answer
        .recv_timeout(Duration::from_secs(30))
        .expect("the reader blocked")
        .expect("the reader accepted it")
}

const HEADER: &str = "rec 1 360 1000\nrec.dat 16 200 11 0 0 0 0 MLII\n";

#[test]
fn a_signal_file_linked_to_dev_zero_is_refused() {
    let dir = folder("zero");
    std::fs::write(dir.join("rec.hea"), HEADER).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("rec.dat")).unwrap();
    let err = error_in_time(move || read_record(&dir.join("rec"), &[]));
    assert!(
        err.starts_with("invalid WFDB signal file: ")
            && err.ends_with("rec.dat: a character device, not a regular file"),
        "{err}"
    );
}

#[test]
fn a_fifo_as_signal_file_header_annotations_or_csv_is_refused_at_once() {
    let dir = folder("fifo");
    std::fs::write(dir.join("rec.hea"), HEADER).unwrap();
    for name in ["rec.dat", "other.hea", "rec.atr", "x.csv"] {
        assert!(Command::new("mkfifo")
            .arg(dir.join(name))
            .status()
            .unwrap()
            .success());
    }
    let d = dir.clone();
    let err = error_in_time(move || read_record(&d.join("rec"), &[]));
    assert!(
        err.ends_with("rec.dat: a FIFO (named pipe), not a regular file"),
        "{err}"
    );
    let d = dir.clone();
    let err = error_in_time(move || read_header(&d.join("other.hea")));
    assert!(err.starts_with("invalid WFDB header: "), "{err}");
    let d = dir.clone();
    let err = error_in_time(move || read_annotations(&d.join("rec.atr")));
    assert!(err.starts_with("invalid annotation file: "), "{err}");
    let d = dir.clone();
    let err = error_in_time(move || read_csv(&d.join("x.csv"), &CsvOptions::default()));
    assert!(
        err.starts_with("invalid CSV: ") && err.contains("FIFO"),
        "{err}"
    );
    let err = error_in_time(move || read_csv_header(&dir.join("x.csv"), None));
    assert!(
        err.starts_with("invalid CSV: ") && err.contains("FIFO"),
        "{err}"
    );
}

#[test]
fn a_signal_file_far_longer_than_its_header_says_is_read_only_that_far() {
    let dir = folder("long");
    std::fs::write(dir.join("rec.hea"), HEADER).unwrap();
    // A terabyte (sparse: no disk is used): reading it whole would take all memory.
    let file = std::fs::File::create(dir.join("rec.dat")).unwrap();
    file.set_len(1 << 40).unwrap();
    let record = read_record(&dir.join("rec"), &[]).unwrap();
    assert_eq!(record.table.len(), 1000);
    assert_eq!(record.table.column::<f32>("MLII").unwrap(), &[0.0; 1000]);
}

#[test]
fn an_oversized_header_is_refused_not_read() {
    let dir = folder("big-header");
    let file = std::fs::File::create(dir.join("rec.hea")).unwrap();
    file.set_len(1 << 40).unwrap();
    let err = read_header(&dir.join("rec.hea")).unwrap_err().to_string();
    assert!(
        err.starts_with("invalid WFDB header: ") && err.contains("rec.hea: more than 16777216"),
        "{err}"
    );
}

#[test]
fn a_csv_header_is_read_from_the_first_lines_of_a_long_file() {
    let dir = folder("csv-head");
    let path = dir.join("x.csv");
    let mut text = String::from("'time','MLII'\n'seconds','mV'\n");
    for i in 0..200_000 {
        text.push_str(&format!("{}.000,0.5\n", i));
    }
    std::fs::write(&path, &text).unwrap();
    let head = read_csv_header(&path, None).unwrap();
    assert_eq!(head.names, ["time", "MLII"]);
    assert_eq!(
        head.units.as_deref(),
        Some(&["seconds".to_owned(), "mV".to_owned()][..])
    );
    assert_eq!(head.delimiter, b',');
    // A first line longer than the first read, then blank lines: read further until whole.
    let long_name = "n".repeat(3 << 20);
    std::fs::write(&path, format!("a,{long_name}\n\n\n'u','v'\n1,2\n")).unwrap();
    let head = read_csv_header(&path, None).unwrap();
    assert_eq!(head.names[1].len(), 3 << 20);
    assert_eq!(
        head.units.as_deref(),
        Some(&["u".to_owned(), "v".to_owned()][..])
    );
    assert_eq!(head.first_data_line, 5);
}
