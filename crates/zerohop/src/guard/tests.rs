//! The guard on host memory: every byte of every guarded column is watched, nothing else is,
//! and the fast fingerprint is the one its definition gives. Small tables: runs under Miri.

use super::fingerprint::{add_range, reference, Fingerprint};
use super::*;
use crate::dtype::DType;
use crate::soa::{ComponentOrder, MapOptions, Schema, SoaTable, TensorMap};

fn schema() -> Schema {
    Schema::builder()
        .scalar("run", DType::I32)
        .column("pt", DType::F32)
        .column("eta", DType::F32)
        .vector("position", DType::F32, 3)
        .matrix("cov", DType::F64, 2, 2, ComponentOrder::ColumnMajor)
        .column("flag", DType::U8)
        .column("unmapped", DType::F32)
        .build()
        .unwrap()
}

const SPEC: &str = "kin: pt, eta; position; cov; flag; run";
const MAPPED: [&str; 6] = ["pt", "eta", "position", "cov", "flag", "run"];

/// A table of `rows` rows whose every byte (padding too) differs from its neighbours'.
fn table(rows: usize) -> SoaTable {
    let table = SoaTable::new(schema(), rows).unwrap();
    let (base, bytes) = (table.buffer().as_ptr(), table.layout().total_bytes);
    for i in 0..bytes {
        // SAFETY: inside the table's host buffer, which nothing else borrows.
        unsafe { *base.add(i) = (i * 7 + 3) as u8 };
    }
    table
}

fn guard(table: &Table, stream: Stream) -> WriteGuard {
    let map = TensorMap::parse(SPEC).unwrap();
    let tensors = table.map(&map, MapOptions::default(), None).unwrap();
    WriteGuard::over_mapped(table, &tensors, stream).unwrap()
}

/// The address of every byte of column `name`'s elements.
fn bytes_of(table: &Table, name: &str) -> Vec<*mut u8> {
    let view = table.column(name, ColumnOptions::default()).unwrap().0;
    let item = view.dtype().itemsize();
    let mut out = Vec::new();
    for_each_offset(view.shape(), view.strides(), |offset| {
        for b in 0..item {
            out.push(view.data_ptr().wrapping_add(offset as usize * item + b));
        }
    });
    out
}

/// Xors `bits` into the byte at `at`, runs `check`, and puts the byte back.
fn flipped(at: *mut u8, bits: u8, check: impl FnOnce()) {
    // SAFETY: `at` is a byte of a live test table that nothing else borrows now.
    unsafe { *at ^= bits };
    check();
    // SAFETY: as above.
    unsafe { *at ^= bits };
}

#[test]
fn any_byte_of_any_guarded_column_flipped_is_caught_and_named() {
    // 3 rows of a float32 column are 12 bytes: ranges end inside a word.
    let table = Table::from(table(3));
    let guard = guard(&table, Stream::HOST);
    assert_eq!(guard.columns().collect::<Vec<_>>(), MAPPED);
    assert_eq!(guard.written(Stream::HOST).unwrap(), Vec::<&str>::new());
    guard.verify(Stream::HOST).unwrap();
    for name in MAPPED {
        let bytes = bytes_of(&table, name);
        assert!(!bytes.is_empty(), "{name}");
        // Under Miri, slow, every third byte of each column (its first and some of every
        // word), each with another bit.
        let step = if cfg!(miri) { 3 } else { 1 };
        for (i, &at) in bytes.iter().enumerate().step_by(step) {
            // One bit and all bits of the byte (Miri tries the one bit).
            let all: &[u8] = if cfg!(miri) { &[] } else { &[0xff] };
            for &bits in [1u8 << (i % 8)].iter().chain(all) {
                flipped(at, bits, || {
                    assert_eq!(guard.written(Stream::HOST).unwrap(), [name], "byte {i}");
                    let err = guard.verify(Stream::HOST).unwrap_err().to_string();
                    assert!(
                        err.contains(&format!("column {name:?} was written")),
                        "{err}"
                    );
                    assert!(err.contains(&format!("1 of {}", MAPPED.len())), "{err}");
                });
            }
        }
    }
    guard.verify(Stream::HOST).unwrap();
}

#[test]
fn bytes_outside_the_guarded_columns_may_change() {
    let soa = table(3);
    let (base, total) = (soa.buffer().as_ptr(), soa.layout().total_bytes);
    let table = Table::from(soa);
    let guard = guard(&table, Stream::HOST);
    let watched: HashSet<usize> = MAPPED
        .iter()
        .flat_map(|n| bytes_of(&table, n))
        .map(|p| p as usize)
        .collect();
    let unwatched: Vec<usize> = (0..total)
        .map(|i| base as usize + i)
        .filter(|a| !watched.contains(a))
        .collect();
    // Padding and the unmapped column: most of a 3-row table.
    assert!(unwatched.len() > total / 2, "{}", unwatched.len());
    // Under Miri, slow, every 29th byte.
    let step = if cfg!(miri) { 29 } else { 1 };
    for i in (0..total).step_by(step) {
        let at = base.wrapping_add(i);
        if !watched.contains(&(at as usize)) {
            flipped(at, 0xff, || guard.verify(Stream::HOST).unwrap());
        }
    }
}

#[test]
fn several_columns_written_are_all_listed_first_one_named() {
    let table = Table::from(table(4));
    let guard = guard(&table, Stream::HOST);
    let (cov, pt) = (bytes_of(&table, "cov")[5], bytes_of(&table, "pt")[0]);
    flipped(cov, 4, || {
        flipped(pt, 4, || {
            assert_eq!(guard.written(Stream::HOST).unwrap(), ["pt", "cov"]);
            let err = guard.verify(Stream::HOST).unwrap_err();
            assert!(matches!(err, Error::ReadOnly(_)), "{err:?}");
            let text = err.to_string();
            assert!(text.contains("column \"pt\" was written"), "{text}");
            assert!(
                text.contains("2 of 6 guarded columns changed: pt, cov"),
                "{text}"
            );
        })
    });
}

#[test]
fn values_swapped_within_a_column_are_caught() {
    let table = Table::from(table(6));
    let guard = guard(&table, Stream::HOST);
    let pt = bytes_of(&table, "pt");
    // Rows 1 and 4 of pt exchanged: the sum of the words stays, their positions do not.
    // SAFETY: bytes of the live table, nothing else borrowing it.
    let swap = || unsafe {
        for b in 0..4 {
            std::ptr::swap(pt[4 + b], pt[16 + b]);
        }
    };
    swap();
    assert_eq!(guard.written(Stream::HOST).unwrap(), ["pt"]);
    swap();
    guard.verify(Stream::HOST).unwrap();
}

#[test]
fn a_row_slice_off_the_word_grid_is_guarded_to_its_edges() {
    // Rows 1..4 of a float32 column start 4 bytes into a word.
    let table = Table::from(table(6)).slice_rows(1, 4).unwrap();
    let guard = guard(&table, Stream::HOST);
    let pt = bytes_of(&table, "pt");
    assert_eq!(pt[0] as usize % 8, 4);
    for at in [pt[0], pt[pt.len() - 1]] {
        flipped(at, 0x80, || {
            assert_eq!(guard.written(Stream::HOST).unwrap(), ["pt"]);
        });
    }
    // The rows before and after the slice are not its.
    let before = pt[0].wrapping_sub(1);
    let after = pt[pt.len() - 1].wrapping_add(1);
    for at in [before, after] {
        flipped(at, 0xff, || guard.verify(Stream::HOST).unwrap());
    }
}

#[test]
fn copied_tensors_are_not_the_tables_memory_and_are_not_guarded() {
    // pt, eta and unmapped are not evenly spaced: a copy with allow_copy.
    let table = Table::from(table(3));
    let map = TensorMap::parse("odd: pt, eta, unmapped; position").unwrap();
    let options = MapOptions {
        allow_copy: true,
        ..Default::default()
    };
    let err = table.map(&map, MapOptions::default(), None).unwrap_err();
    assert!(err.to_string().contains("not evenly spaced"), "{err}");
    let tensors = table.map(&map, options, None).unwrap();
    assert!(tensors[0].copied() && !tensors[1].copied());
    let guard = WriteGuard::over_mapped(&table, &tensors, Stream::HOST).unwrap();
    assert_eq!(guard.columns().collect::<Vec<_>>(), ["position"]);
}

#[test]
fn the_fast_fingerprint_is_the_defined_one_at_every_length_and_alignment() {
    let data: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
    let lens: Vec<usize> = if cfg!(miri) {
        vec![0, 1, 7, 8, 9, 63, 64, 65, 130]
    } else {
        (0..=200).collect()
    };
    for start in 0..8 {
        for &len in &lens {
            let bytes = &data[start..start + len];
            for first in [0u64, 5] {
                let mut fast = Fingerprint::default();
                add_range(bytes, first, &mut fast);
                assert_eq!(fast, reference(bytes, first), "start {start} len {len}");
            }
        }
    }
}

#[test]
fn one_changed_byte_always_changes_the_sum() {
    // The sum of the words changes by the byte's change times a power of 256, never 0 mod
    // 2^64: every single-byte write is caught, not merely probably.
    // Under Miri, slow, 64 bytes: still every byte of eight words.
    let len = if cfg!(miri) { 64 } else { 256 };
    let mut data: Vec<u8> = (0..len).map(|i: u32| (i * 37) as u8).collect();
    let before = reference(&data, 0);
    let deltas: &[u8] = if cfg!(miri) {
        &[1, 0x80, 0xff]
    } else {
        &[1, 2, 0x55, 0x80, 0xff]
    };
    for i in 0..data.len() {
        for &d in deltas {
            data[i] ^= d;
            let mut after = Fingerprint::default();
            add_range(&data, 0, &mut after);
            assert_ne!(after.sum, before.sum, "byte {i} xor {d:#x}");
            data[i] ^= d;
        }
    }
}
