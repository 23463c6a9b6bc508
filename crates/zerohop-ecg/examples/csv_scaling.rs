//! Where the CSV reader's time goes on a many-core machine: reading the file into memory (what
//! `read_csv` does) or mapping it (what it did before a truncated file could SIGBUS it),
//! parsing from an already-mapped file at 1…N threads. Writes a 20 M-sample CSV first if none is given.
//!
//!     cargo run --release -p zerohop-ecg --example csv_scaling [file.csv]

use std::path::PathBuf;
use std::time::Instant;

use zerohop_ecg::csv::{parse_csv, read_csv, CsvOptions};
use zerohop_ecg::synth::{generate, write_csv, SynthOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::args().nth(1) {
        Some(p) => PathBuf::from(p),
        None => {
            let path = std::env::temp_dir().join("csv_scaling.csv");
            if !path.exists() {
                let options = SynthOptions {
                    rate: 250.0,
                    seconds: 80_000.0,
                    ..Default::default()
                };
                write_csv(&generate(&options)?, &path, None)?;
            }
            path
        }
    };
    let options = CsvOptions::default();
    let bytes = std::fs::metadata(&path)?.len() as f64;
    for _ in 0..2 {
        let t = Instant::now();
        let table = read_csv(&path, &options)?;
        println!(
            "read_csv (read into memory + parse): {:.4} s, {} rows",
            t.elapsed().as_secs_f64(),
            table.len()
        );
    }
    let t = Instant::now();
    let copy = std::fs::read(&path)?;
    println!("read into memory: {:.4} s", t.elapsed().as_secs_f64());
    drop(copy);
    let file = std::fs::File::open(&path)?;
    let t = Instant::now();
    // SAFETY: a read-only map of a file nothing else writes during the run.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file)? };
    println!("map with populate: {:.4} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    // SAFETY: as above.
    let lazy = unsafe { memmap2::Mmap::map(&file)? };
    println!("map lazily: {:.6} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let table = parse_csv(&lazy, &path, &options)?;
    println!(
        "parse, lazily mapped: {:.4} s ({} rows)",
        t.elapsed().as_secs_f64(),
        table.len()
    );
    drop(table);
    let max = std::thread::available_parallelism()?.get();
    let mut threads = 1;
    while threads <= max {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?;
        let best = (0..3)
            .map(|_| {
                let t = Instant::now();
                pool.install(|| parse_csv(&map, &path, &options))
                    .map(|_| t.elapsed().as_secs_f64())
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .fold(f64::MAX, f64::min);
        println!(
            "parse from the populated map, {threads:2} threads: {best:.4} s ({:.0} MB/s)",
            bytes / best / 1e6
        );
        threads *= 2;
    }
    Ok(())
}
