//! Shared segments: the pure checks run under Miri; the ones that make memfds and mappings
//! (system calls Miri cannot run) run natively.

use super::*;

fn handle() -> SharedHandle {
    SharedHandle {
        name: "zerohop-1-0".into(),
        boot_id: "boot".into(),
        pid: 1,
        fd: 3,
        dev: 7,
        ino: 11,
        segment_len: 8192,
        offset: 4096,
        len: 4096,
    }
}

fn message(err: Error) -> String {
    err.to_string()
}

#[test]
fn range_map_finds_the_range_holding_a_span() {
    let mut map = RangeMap::new();
    map.insert(1000, 100, 'a');
    map.insert(2000, 50, 'b');
    assert_eq!(map.find(1000, 100), Some((1000, &'a')));
    assert_eq!(map.find(1050, 50), Some((1000, &'a')));
    assert_eq!(map.find(1050, 0), Some((1000, &'a')));
    assert_eq!(map.find(2049, 1), Some((2000, &'b')));
    assert_eq!(map.find(1050, 51), None, "runs past the end");
    assert_eq!(map.find(999, 2), None, "starts before");
    assert_eq!(map.find(1100, 0), None, "one past the end is outside");
    assert_eq!(map.find(1500, 1), None, "between ranges");
    assert_eq!(map.find(usize::MAX, 2), None, "overflow");
    assert_eq!(map.remove(1000), Some('a'));
    assert_eq!(map.find(1050, 1), None);
    assert_eq!(map.values().count(), 1);
}

#[test]
fn handles_with_ranges_outside_their_segment_are_refused() {
    assert!(handle().check().is_ok());
    let cases = [
        SharedHandle {
            len: 4097,
            ..handle()
        },
        SharedHandle {
            offset: usize::MAX,
            ..handle()
        },
        SharedHandle {
            segment_len: 0,
            offset: 0,
            len: 0,
            ..handle()
        },
        SharedHandle {
            segment_len: usize::MAX,
            ..handle()
        },
        SharedHandle { pid: 0, ..handle() },
        SharedHandle { fd: -1, ..handle() },
    ];
    for bad in cases {
        let err = message(bad.check().unwrap_err());
        assert!(err.contains("shared-memory handle"), "{err}");
        assert!(err.contains("zerohop-1-0"), "names the segment: {err}");
    }
}

#[test]
fn opened_files_must_be_the_handles_own() {
    let h = handle();
    assert!(h.check_machine("boot").is_ok());
    assert!(message(h.check_machine("other").unwrap_err()).contains("another machine"));
    assert!(h.check_file(7, 11, 8192).is_ok());
    assert!(message(h.check_file(7, 12, 8192).unwrap_err()).contains("stale handle"));
    assert!(message(h.check_file(8, 11, 8192).unwrap_err()).contains("stale handle"));
    let size = message(h.check_file(7, 11, 4096).unwrap_err());
    assert!(
        size.contains("4096 bytes") && size.contains("8192"),
        "{size}"
    );
}

#[test]
fn segments_are_whole_pages() {
    assert_eq!(segment_len(0, 4096).unwrap(), 4096);
    assert_eq!(segment_len(1, 4096).unwrap(), 4096);
    assert_eq!(segment_len(4096, 4096).unwrap(), 4096);
    assert_eq!(segment_len(4097, 4096).unwrap(), 8192);
    assert!(segment_len(usize::MAX - 10, 4096).is_err());
    assert!(segment_len(isize::MAX as usize, 4096).is_err());
}

/// `SoaTable::over_buffer`, the receiving end of a table sent to another process.
mod received_tables {
    use crate::buffer::Buffer;
    use crate::dtype::DType;
    use crate::soa::{ColumnKind, ColumnSpec, Schema, SoaTable};

    fn schema() -> Schema {
        Schema::new(vec![
            ColumnSpec {
                name: "x".into(),
                dtype: DType::F32,
                kind: ColumnKind::Column,
            },
            ColumnSpec {
                name: "v".into(),
                dtype: DType::F64,
                kind: ColumnKind::Vector(2),
            },
        ])
        .unwrap()
    }

    #[test]
    fn a_table_over_received_bytes_reads_them_in_place() {
        let mut sent = SoaTable::new(schema(), 10).unwrap();
        sent.column_mut::<f32>("x").unwrap()[3] = 7.5;
        let bytes = sent.layout().total_bytes;
        let received = Buffer::zeroed_host(bytes, 64).unwrap();
        // SAFETY: two distinct host buffers of `bytes` bytes; nothing else uses them.
        unsafe { std::ptr::copy_nonoverlapping(sent.buffer().as_ptr(), received.as_ptr(), bytes) };
        let table = SoaTable::over_buffer(schema(), 10, 128, received.clone(), 2, 5).unwrap();
        assert_eq!(
            table.buffer().as_ptr(),
            received.as_ptr(),
            "a view, not a copy"
        );
        assert_eq!((table.first_row(), table.len()), (2, 5));
        assert_eq!(table.column::<f32>("x").unwrap()[1], 7.5);
    }

    #[test]
    fn buffers_that_do_not_fit_the_layout_are_refused() {
        let bytes = SoaTable::new(schema(), 10).unwrap().layout().total_bytes;
        let short = Buffer::zeroed_host(bytes - 1, 128).unwrap();
        let err = SoaTable::over_buffer(schema(), 10, 128, short, 0, 10).unwrap_err();
        assert!(err.to_string().contains("take"), "{err}");
        let whole = Buffer::zeroed_host(bytes + 8, 128).unwrap();
        let window = SoaTable::over_buffer(schema(), 10, 128, whole.clone(), 8, 3).unwrap_err();
        assert!(window.to_string().contains("outside"), "{window}");
        // SAFETY: the pointer is 4 bytes into `whole`, which holds `bytes + 8` bytes; the
        // wrapper keeps `whole` alive and is never read here.
        let misaligned = unsafe {
            Buffer::from_foreign(
                std::ptr::NonNull::new(whole.as_ptr().add(4)).unwrap(),
                bytes,
                crate::Device::CPU,
                std::sync::Arc::new(whole.clone()),
            )
        };
        let err = SoaTable::over_buffer(schema(), 10, 128, misaligned, 0, 10).unwrap_err();
        assert!(err.to_string().contains("not aligned"), "{err}");
        assert!(SoaTable::over_buffer(schema(), 10, 3, whole, 0, 10).is_err());
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use crate::memory::{PoolConfig, PoolResource};

    fn fill(ptr: NonNull<u8>, len: usize, byte: u8) {
        // SAFETY: callers pass a live block of at least `len` bytes they own.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), byte, len) };
    }

    fn read(ptr: *const u8, len: usize) -> Vec<u8> {
        // SAFETY: callers pass a live mapping of at least `len` bytes.
        unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec()
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn a_second_mapping_sees_the_same_memory() {
        let shared = SharedResource::new().unwrap();
        let ptr = shared.allocate(10_000, 128, Stream::HOST).unwrap();
        assert_eq!(ptr.as_ptr() as usize % sys::page_size(), 0);
        fill(ptr, 10_000, 0xAB);
        let h = handle_for(ptr.as_ptr().wrapping_add(100), 50)
            .unwrap()
            .unwrap();
        assert_eq!((h.offset, h.len, h.pid), (100, 50, std::process::id()));
        assert_eq!(h.segment_len, 12_288);
        assert!(h
            .name
            .starts_with(&format!("zerohop-{}-", std::process::id())));

        // In this process the segment's own mapping is reused: the same address.
        let same = attach(&h).unwrap();
        assert_eq!(same.buffer.as_ptr(), ptr.as_ptr().wrapping_add(100));
        assert!(same.writable);

        // Through /proc, as another process attaches: another address, the same memory.
        let other = map_remote(&h).unwrap();
        assert_ne!(other.ptr, ptr);
        assert_eq!(read(other.ptr.as_ptr(), 4), vec![0xAB; 4]);
        fill(other.ptr, 1, 0x11);
        assert_eq!(
            read(ptr.as_ptr(), 1),
            vec![0x11],
            "a write through one shows in the other"
        );
        drop((same, other));
        // SAFETY: allocated above with these arguments; no view of it is left.
        unsafe { shared.deallocate(ptr, 10_000, 128, Stream::HOST) };
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn an_attached_buffer_outlives_the_allocation() {
        let shared = SharedResource::new().unwrap();
        let ptr = shared.allocate(64, 64, Stream::HOST).unwrap();
        fill(ptr, 64, 7);
        let h = handle_for(ptr.as_ptr(), 64).unwrap().unwrap();
        let attached = attach(&h).unwrap();
        // SAFETY: allocated above with these arguments; `attached` keeps its own reference.
        unsafe { shared.deallocate(ptr, 64, 64, Stream::HOST) };
        // SAFETY: the attached buffer keeps the mapping alive and nothing writes to it.
        assert_eq!(
            unsafe { attached.buffer.as_host_bytes() }.unwrap(),
            &[7u8; 64]
        );
        let name = h.name.clone();
        drop(attached);
        let after = handle_for(ptr.as_ptr(), 1).unwrap();
        assert!(
            after.is_none_or(|h| h.name != name),
            "the segment is forgotten once its last buffer goes"
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn stale_handles_are_refused() {
        let shared = SharedResource::new().unwrap();
        let ptr = shared.allocate(100, 64, Stream::HOST).unwrap();
        let h = handle_for(ptr.as_ptr(), 100).unwrap().unwrap();
        // SAFETY: allocated above with these arguments.
        unsafe { shared.deallocate(ptr, 100, 64, Stream::HOST) };
        let err = message(attach(&h).unwrap_err());
        assert!(err.contains("stale handle"), "{err}");

        // A new segment likely gets the freed descriptor number: the identity tells them apart.
        let next = shared.allocate(100, 64, Stream::HOST).unwrap();
        let err = message(attach(&h).unwrap_err());
        assert!(err.contains("stale handle"), "{err}");
        // SAFETY: allocated above with these arguments.
        unsafe { shared.deallocate(next, 100, 64, Stream::HOST) };
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn handles_that_disagree_with_the_segment_are_refused() {
        let shared = SharedResource::new().unwrap();
        let ptr = shared.allocate(100, 64, Stream::HOST).unwrap();
        let h = handle_for(ptr.as_ptr(), 100).unwrap().unwrap();
        let bigger = SharedHandle {
            segment_len: h.segment_len * 2,
            ..h.clone()
        };
        assert!(message(attach(&bigger).unwrap_err()).contains("the handle says"));
        assert!(message(map_remote(&bigger).unwrap_err()).contains("the handle says"));
        let elsewhere = SharedHandle {
            boot_id: "another-boot".into(),
            ..h.clone()
        };
        assert!(message(attach(&elsewhere).unwrap_err()).contains("another machine"));
        let outside = SharedHandle {
            offset: h.segment_len,
            ..h.clone()
        };
        assert!(message(attach(&outside).unwrap_err()).contains("outside segment"));
        // SAFETY: allocated above with these arguments.
        unsafe { shared.deallocate(ptr, 100, 64, Stream::HOST) };
    }

    #[test]
    #[cfg_attr(miri, ignore = "opens files, a system call Miri cannot run")]
    fn files_without_seals_are_not_mapped() {
        let path = std::env::temp_dir().join(format!("zerohop-unsealed-{}", std::process::id()));
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let file = File::open(&path).unwrap();
        let (dev, ino, len) = sys::identity(&file).unwrap();
        let h = SharedHandle {
            name: "a plain file".into(),
            boot_id: sys::boot_id().unwrap(),
            pid: std::process::id(),
            fd: sys::raw_fd(&file),
            dev,
            ino,
            segment_len: len as usize,
            offset: 0,
            len: 16,
        };
        let err = message(attach(&h).unwrap_err());
        assert!(err.contains("not sealed"), "{err}");
        drop(file);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn alignment_and_size_limits() {
        let shared = SharedResource::new().unwrap();
        assert!(shared.allocate(8, 3, Stream::HOST).is_err());
        let err = shared
            .allocate(8, sys::page_size() * 2, Stream::HOST)
            .unwrap_err();
        assert!(err.to_string().contains("page-aligned"), "{err}");
        assert!(shared.allocate(usize::MAX - 10, 64, Stream::HOST).is_err());
        assert!(shared.allocate(1 << 60, 64, Stream::HOST).is_err());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn pooled_blocks_are_ranges_of_one_segment() {
        let pool = PoolResource::new(
            Arc::new(SharedResource::new().unwrap()),
            PoolConfig {
                initial: 1 << 20,
                maximum: None,
            },
        );
        let a = pool.allocate(1000, 256, Stream::HOST).unwrap();
        let b = pool.allocate(1000, 256, Stream::HOST).unwrap();
        let ha = handle_for(a.as_ptr(), 1000).unwrap().unwrap();
        let hb = handle_for(b.as_ptr(), 1000).unwrap().unwrap();
        assert_eq!(ha.name, hb.name);
        assert_ne!(ha.offset, hb.offset);
        // SAFETY: both allocated above with these arguments.
        unsafe {
            pool.deallocate(a, 1000, 256, Stream::HOST);
            pool.deallocate(b, 1000, 256, Stream::HOST);
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "memfd_create and mmap are system calls Miri cannot run"
    )]
    fn a_table_in_shared_memory_is_seen_through_a_second_mapping() {
        use crate::soa::{ColumnKind, ColumnSpec, Schema, SoaTable};
        let schema = || {
            Schema::new(vec![ColumnSpec {
                name: "x".into(),
                dtype: crate::DType::F64,
                kind: ColumnKind::Column,
            }])
            .unwrap()
        };
        let shared: Arc<dyn MemoryResource> = Arc::new(SharedResource::new().unwrap());
        let mut table = SoaTable::with_options(schema(), 100, 128, shared).unwrap();
        let bytes = table.layout().total_bytes;
        let h = handle_for(table.buffer().as_ptr(), bytes).unwrap().unwrap();
        let second = map_remote(&h).unwrap();
        // SAFETY: the mapping holds the segment, at least `bytes` long, alive while `second`
        // lives; the buffer borrows it through a clone.
        let buffer =
            unsafe { Buffer::from_foreign(second.ptr, bytes, Device::CPU, second.clone()) };
        let seen = SoaTable::over_buffer(schema(), 100, 128, buffer, 0, 100).unwrap();
        assert_ne!(seen.buffer().as_ptr(), table.buffer().as_ptr());
        table.column_mut::<f64>("x").unwrap()[42] = 4.25;
        assert_eq!(seen.column::<f64>("x").unwrap()[42], 4.25);
    }

    #[test]
    fn memory_elsewhere_has_no_handle() {
        let v = [0u8; 16];
        assert_eq!(handle_for(v.as_ptr(), 16).unwrap(), None);
    }
}
