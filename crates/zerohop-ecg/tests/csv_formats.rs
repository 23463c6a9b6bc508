//! CSV files as people have them, written to a temporary directory and read back: PhysioNet's
//! export (quoted names, a units row, a time column), `;` and tab files, CRLF, a byte-order
//! mark, columns by index, and files whose delimiter cannot be told.

use std::path::{Path, PathBuf};

use zerohop_ecg::csv::{
    is_time_axis, read_csv, read_header, time_axis_rate, CsvOptions, EmptyField,
};

/// A directory of this test process's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("zerohop-csv-formats-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn only(columns: &[&str]) -> CsvOptions {
    CsvOptions {
        columns: columns.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    }
}

fn column(path: &Path, options: &CsvOptions, name: &str) -> Vec<f32> {
    read_csv(path, options)
        .unwrap()
        .column::<f32>(name)
        .unwrap()
        .to_vec()
}

/// PhysioNet's export of record 100 at 360 Hz: times rounded to the millisecond.
fn physionet_export(rows: usize, newline: &str) -> (String, Vec<f32>) {
    let mut text = format!("'Elapsed time','MLII','V5'{newline}'seconds','mV','mV'{newline}");
    let mut mlii = Vec::new();
    for i in 0..rows {
        let value = ((i as f32 * 0.07).sin() * 1000.0).round() / 1000.0;
        mlii.push(value);
        text.push_str(&format!(
            "{:.3},{value:.3},{:.3}{newline}",
            i as f64 / 360.0,
            -value
        ));
    }
    (text, mlii)
}

#[test]
fn a_physionet_export_reads_with_names_units_and_a_time_axis() {
    let dir = TempDir::new("physionet");
    let (text, mlii) = physionet_export(3000, "\n");
    let path = dir.write("100.csv", text.as_bytes());

    let header = read_header(&path, None).unwrap();
    assert_eq!(header.names, ["Elapsed time", "MLII", "V5"]);
    let units = header.units.clone().unwrap();
    assert_eq!(units, ["seconds", "mV", "mV"]);
    assert_eq!((header.delimiter, header.has_header), (b',', true));
    assert_eq!(header.first_data_line, 3);

    let table = read_csv(&path, &CsvOptions::default()).unwrap();
    assert_eq!(table.len(), 3000);
    assert_eq!(table.column::<f32>("MLII").unwrap(), &mlii[..]);
    let time = table.column::<f32>("Elapsed time").unwrap();
    assert!(is_time_axis(time));
    assert!(!is_time_axis(table.column::<f32>("MLII").unwrap()));
    assert_eq!(time_axis_rate(time, Some(&units[0])), Some(360.0));

    // The same export with clock times ('hh:mm:ss.mmm') reads the times as seconds.
    let mut clock = String::from("'Elapsed time','MLII'\n'hh:mm:ss.mmm','mV'\n");
    for i in 0..1000 {
        let ms = (i as f64 / 360.0 * 1000.0).round() as u64;
        clock.push_str(&format!(
            "'{}:{:02}.{:03}',0.5\n",
            ms / 60_000,
            ms / 1000 % 60,
            ms % 1000
        ));
    }
    let path = dir.write("clock.csv", clock.as_bytes());
    let header = read_header(&path, None).unwrap();
    let time = column(&path, &CsvOptions::default(), "Elapsed time");
    assert_eq!(
        time_axis_rate(&time, Some(&header.units.unwrap()[0])),
        Some(360.0)
    );
    assert_eq!(column(&path, &only(&["MLII"]), "MLII"), vec![0.5; 1000]);
}

#[test]
fn semicolon_and_tab_files_are_sniffed() {
    let dir = TempDir::new("sniff");
    let semicolon = dir.write("semicolon.csv", b"time;mv\n0;1.5\n0.004;-2.25\n");
    assert_eq!(read_header(&semicolon, None).unwrap().delimiter, b';');
    assert_eq!(
        column(&semicolon, &CsvOptions::default(), "mv"),
        [1.5, -2.25]
    );
    // A spreadsheet's export in a decimal-comma locale.
    let european = dir.write("european.csv", b"\"Zeit\";\"mV\"\n0,000;1,5\n0,004;-2,25\n");
    assert_eq!(
        column(&european, &CsvOptions::default(), "mV"),
        [1.5, -2.25]
    );
    assert_eq!(
        column(&european, &CsvOptions::default(), "Zeit"),
        [0.0, 0.004]
    );
    let tab = dir.write("tab.tsv", b"time\tmv\n0\t1.5\n0.004\t-2.25\n");
    let header = read_header(&tab, None).unwrap();
    assert_eq!((header.delimiter, header.delimiter_sniffed), (b'\t', true));
    assert_eq!(column(&tab, &CsvOptions::default(), "mv"), [1.5, -2.25]);
    // A given delimiter wins over sniffing.
    let given = read_header(&semicolon, Some(b',')).unwrap();
    assert_eq!(
        (given.names, given.delimiter_sniffed),
        (vec!["time;mv".to_string()], false)
    );
    // One column reads with any delimiter.
    let single = dir.write("single.csv", b"mv\n1\n2\n");
    assert_eq!(column(&single, &CsvOptions::default(), "mv"), [1.0, 2.0]);
}

#[test]
fn crlf_and_a_byte_order_mark_everywhere() {
    let dir = TempDir::new("crlf");
    let (text, mlii) = physionet_export(500, "\r\n");
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(text.as_bytes());
    let path = dir.write("crlf.csv", &bytes);
    let header = read_header(&path, None).unwrap();
    assert_eq!(
        header.names[0], "Elapsed time",
        "the BOM is not part of the first name"
    );
    assert_eq!(header.units.unwrap()[2], "mV", "no CR in the last unit");
    assert_eq!(column(&path, &only(&["MLII"]), "MLII"), mlii);
    // Without a final line end, and single-column (the one-pass path).
    let path = dir.write("last.csv", b"\xEF\xBB\xBFmv\r\n1.5\r\n\r\n-2\r\n3");
    assert_eq!(
        column(&path, &CsvOptions::default(), "mv"),
        [1.5, -2.0, 3.0]
    );
    let path = dir.write("bom.csv", b"\xEF\xBB\xBF1.5\r\n2\r\n");
    let header = read_header(&path, None).unwrap();
    assert!(!header.has_header, "a BOM does not make a number a name");
    assert_eq!(column(&path, &CsvOptions::default(), "c0"), [1.5, 2.0]);
}

#[test]
fn columns_by_index_and_errors_that_list_the_columns() {
    let dir = TempDir::new("index");
    let (text, mlii) = physionet_export(100, "\n");
    let path = dir.write("100.csv", text.as_bytes());
    assert_eq!(column(&path, &only(&["1"]), "MLII"), mlii);
    let table = read_csv(&path, &only(&["2", "MLII"])).unwrap();
    let names: Vec<&str> = table
        .schema()
        .columns()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["V5", "MLII"]);
    let err = read_csv(&path, &only(&["'MLII'"])).unwrap_err().to_string();
    assert!(
        err.contains("100.csv: no column \"'MLII'\" (columns: Elapsed time, MLII, V5; or a 0-based index below 3)"),
        "{err}"
    );
    let err = read_csv(&path, &only(&["7"])).unwrap_err().to_string();
    assert!(err.contains("no column \"7\""), "{err}");
}

#[test]
fn files_whose_delimiter_cannot_be_told_are_refused_clearly() {
    let dir = TempDir::new("ambiguous");
    // `;` and tab both split every line into two fields.
    let path = dir.write("mixed.csv", b"a;b\tc\n1;2\t3\n4;5\t6\n");
    let err = read_csv(&path, &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("mixed.csv: cannot tell the delimiter: ';' (2 fields) and tab (2 fields)")
            && err.contains("pass the delimiter"),
        "{err}"
    );
    let err = read_header(&path, None).unwrap_err().to_string();
    assert!(err.contains("cannot tell the delimiter"), "{err}");
    // Given, it reads.
    let semicolon = CsvOptions {
        delimiter: b';',
        ..Default::default()
    };
    let err = read_csv(&path, &semicolon).unwrap_err().to_string();
    assert!(err.contains("\"2\\t3\" is not a number"), "{err}");
    // A header split one way and rows another: the first disagreeing row is named.
    let path = dir.write("rows.csv", b"a;b\n1;2\n3,4\n");
    let err = read_csv(&path, &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rows.csv, line 3, column 2 (b): expected 2 fields, found 1 (the delimiter ';' was detected"),
        "{err}"
    );
    // An unclosed quote in the header.
    let path = dir.write("quote.csv", b"'time,mv\n1,2\n");
    let err = read_header(&path, None).unwrap_err().to_string();
    assert!(
        err.contains("quote.csv, line 1, column 1: a quote is not closed"),
        "{err}"
    );
}

#[test]
fn empty_units_and_policies_still_apply() {
    let dir = TempDir::new("policies");
    let path = dir.write("gaps.csv", b"t,mv\ns,\n0,1\n1,\n");
    let header = read_header(&path, None).unwrap();
    assert_eq!(header.units, Some(vec!["s".to_string(), String::new()]));
    let err = read_csv(&path, &CsvOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 4, column 2 (mv): empty field"), "{err}");
    let nan = CsvOptions {
        empty: EmptyField::Nan,
        ..Default::default()
    };
    let mv = column(&path, &nan, "mv");
    assert!(mv[0] == 1.0 && mv[1].is_nan());
    let empty = dir.write("empty.csv", b"");
    assert!(read_header(&empty, None)
        .unwrap_err()
        .to_string()
        .contains("empty.csv"));
}
