//! The Arrow C data interface importer against arbitrary arrays: types (primitives, booleans,
//! strings, fixed-size lists, structs, nested), lengths, offsets, null counts, buffer and
//! child counts, NULL tables, validity bitmaps, string offsets and child lengths, all
//! possibly disagreeing with the declared type, plus arbitrary schema format strings.
//!
//! Every buffer is as long as the declared length and offset require (the one promise the
//! C interface cannot check), so any read past it is the importer's fault and
//! AddressSanitizer reports it. Properties: no panic; the producer's release callback runs
//! exactly once for every struct, imported or refused; a zero-copy tensor made from an
//! imported column lies inside the producer's buffers.
//!
//! The same arrays also arrive as Arrow *device* arrays (CUDA, ROCm, pinned, managed). For
//! devices whose memory the host must not read, every buffer points into pages mapped with no
//! access at all (PROT_NONE): one read by the importer is a SIGSEGV, a crash the fuzzer
//! reports. Children keep their own arbitrary lengths, so they lie about covering their
//! parents as often as not.
#![no_main]

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use zerohop::arrow::arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use zerohop::arrow::arrow_schema::{DataType, Field, Fields};
use zerohop::arrow::{
    array_to_tensor, import_device, import_host_batch, schema_data_type, FFI_ArrowDeviceArray,
    ImportOptions,
};

/// Pages no one may read or write, where device buffers point (see the module's notes).
const UNREADABLE_BYTES: usize = 1 << 20;

fn unreadable_base() -> usize {
    static BASE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        // SAFETY: an anonymous mapping with no access rights, kept for the process's life.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                UNREADABLE_BYTES,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED);
        page as usize
    })
}

/// True while `build` makes a device array whose buffers the host must not read.
static UNREADABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

static RELEASED: AtomicUsize = AtomicUsize::new(0);

#[derive(Arbitrary, Debug, Clone)]
enum Type {
    Int8,
    Int32,
    Int64,
    UInt16,
    Float16,
    Float32,
    Float64,
    Boolean,
    Utf8,
    FixedSizeList(Box<Type>, u8),
    Struct(Vec<Type>),
}

impl Type {
    fn data_type(&self, depth: usize) -> DataType {
        if depth > 4 {
            return DataType::Int32;
        }
        match self {
            Type::Int8 => DataType::Int8,
            Type::Int32 => DataType::Int32,
            Type::Int64 => DataType::Int64,
            Type::UInt16 => DataType::UInt16,
            Type::Float16 => DataType::Float16,
            Type::Float32 => DataType::Float32,
            Type::Float64 => DataType::Float64,
            Type::Boolean => DataType::Boolean,
            Type::Utf8 => DataType::Utf8,
            Type::FixedSizeList(item, k) => DataType::FixedSizeList(
                Arc::new(Field::new("item", item.data_type(depth + 1), true)),
                (*k % 9) as i32,
            ),
            Type::Struct(fields) => DataType::Struct(Fields::from(
                fields
                    .iter()
                    .take(4)
                    .enumerate()
                    .map(|(i, t)| Field::new(format!("f{i}"), t.data_type(depth + 1), true))
                    .collect::<Vec<_>>(),
            )),
        }
    }
}

/// How a producer may get a node wrong.
#[derive(Arbitrary, Debug, Default)]
struct Node {
    length: u16,
    offset: u8,
    null_count: i8,
    validity: bool,
    bits: Vec<u8>,
    /// String offsets and values bytes (arbitrary, so possibly decreasing or past the end).
    offsets: Vec<i16>,
    values: Vec<u8>,
    extra_buffers: i8,
    extra_children: i8,
    null_buffer_table: bool,
    null_children_table: bool,
    released: bool,
    misalign: bool,
    children: Vec<Node>,
}

/// What a struct owns; freed by its release callback (or by the test when a producer hands
/// over an already-released struct).
struct Private {
    buffers: Vec<Vec<u64>>,
    buffer_ptrs: Vec<*const c_void>,
    children: Vec<*mut RawArray>,
    /// `n_children` entries: the children, then NULLs when a producer over-counts.
    child_table: Vec<*mut RawArray>,
}

/// `struct ArrowArray` as the C data interface lays it out.
#[repr(C)]
struct RawArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *const *const c_void,
    children: *const *mut RawArray,
    dictionary: *mut RawArray,
    release: Option<unsafe extern "C" fn(*mut RawArray)>,
    private_data: *mut c_void,
}

/// Frees what `array` owns, children included, once (private_data is cleared).
///
/// # Safety
/// `array` is a live struct made by `build`.
unsafe fn free_node(array: *mut RawArray) {
    // SAFETY: live, per the contract.
    let array = unsafe { &mut *array };
    if array.private_data.is_null() {
        return;
    }
    // SAFETY: private_data is the Box<Private> that `build` leaked.
    let private = unsafe { Box::from_raw(array.private_data as *mut Private) };
    array.private_data = std::ptr::null_mut();
    for &child in &private.children {
        // SAFETY: children are Boxes made by `build` and owned by their parent.
        unsafe {
            free_node(child);
            drop(Box::from_raw(child));
        }
    }
}

unsafe extern "C" fn release(array: *mut RawArray) {
    RELEASED.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the consumer releases a live struct it got from `build`.
    unsafe {
        free_node(array);
        (*array).release = None;
    }
}

/// A buffer of at least `bytes` bytes (one byte in, when misaligned) filled from `fill`.
fn buffer(bytes: usize, fill: &[u8], misalign: bool) -> Vec<u64> {
    let mut words = vec![0u64; (bytes + 1).div_ceil(8) + 1];
    // SAFETY: u64 has no padding and any byte pattern is a valid u8.
    let raw =
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) };
    let start = usize::from(misalign);
    for (i, b) in raw[start..start + bytes].iter_mut().enumerate() {
        *b = fill.get(i % fill.len().max(1)).copied().unwrap_or(0xA5);
    }
    words
}

fn build(t: &DataType, node: &Node, depth: usize) -> RawArray {
    let length = node.length as usize % 300;
    let offset = node.offset as usize % 8;
    let total = length + offset;
    let empty = Node::default();
    // (bytes, fill, misaligned): the validity bitmap first.
    let mut buffers: Vec<(usize, Vec<u8>, bool)> =
        vec![(total.div_ceil(8), node.bits.clone(), false)];
    let mut children: Vec<(DataType, &Node)> = vec![];
    match t {
        DataType::Boolean => buffers.push((total.div_ceil(8), node.bits.clone(), false)),
        DataType::Utf8 => {
            let offsets: Vec<i32> = (0..=total)
                .map(|i| node.offsets.get(i).map_or(i as i32, |&o| i32::from(o)))
                .collect();
            // The values buffer is as long as the last offset says (arrow-rs sizes it so,
            // the one promise a producer makes here); the offsets themselves may be wrong.
            let values_len = node.values.len().max(offsets[total].max(0) as usize);
            let bytes: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
            buffers.push(((total + 1) * 4, bytes, false));
            buffers.push((values_len, node.values.clone(), false));
        }
        DataType::FixedSizeList(f, _) => children.push((
            f.data_type().clone(),
            node.children.first().unwrap_or(&empty),
        )),
        DataType::Struct(fields) => {
            for (i, f) in fields.iter().enumerate() {
                children.push((
                    f.data_type().clone(),
                    node.children.get(i).unwrap_or(&empty),
                ));
            }
        }
        other => {
            let width = other.primitive_width().unwrap_or(1);
            buffers.push((total * width, node.values.clone(), node.misalign));
        }
    }
    let n_buffers = (buffers.len() as i64 + node.extra_buffers as i64 % 2).max(0) as usize;
    let storage: Vec<Vec<u64>> = buffers
        .iter()
        .map(|(bytes, fill, misalign)| buffer(*bytes, fill, *misalign))
        .collect();
    let mut buffer_ptrs: Vec<*const c_void> = storage
        .iter()
        .zip(&buffers)
        .enumerate()
        .map(|(i, (s, (_, _, misalign)))| {
            if i == 0 && !node.validity {
                std::ptr::null()
            } else if UNREADABLE.load(Ordering::SeqCst) {
                // Somewhere in the unreadable pages (every buffer a device type allows is
                // under 4 KiB: at most 308 entries of 8 bytes), 64-byte aligned.
                let at = ((s.as_ptr() as usize).wrapping_mul(7) % (UNREADABLE_BYTES - 8192)) & !63;
                (unreadable_base() + at + usize::from(*misalign)) as *const c_void
            } else {
                (s.as_ptr() as *const u8).wrapping_add(usize::from(*misalign)) as *const c_void
            }
        })
        .collect();
    buffer_ptrs.resize(n_buffers.max(buffer_ptrs.len()), std::ptr::null());
    let child_arrays: Vec<*mut RawArray> = if depth > 5 {
        vec![]
    } else {
        children
            .iter()
            .map(|(ct, cn)| Box::into_raw(Box::new(build(ct, cn, depth + 1))))
            .collect()
    };
    let n_children = (child_arrays.len() as i64 + node.extra_children as i64 % 2).max(0);
    let mut child_table = child_arrays.clone();
    child_table.resize(n_children as usize, std::ptr::null_mut());
    let private = Box::new(Private {
        buffers: storage,
        buffer_ptrs,
        children: child_arrays,
        child_table,
    });
    RawArray {
        length: length as i64,
        null_count: if node.null_count < 0 {
            -1
        } else {
            node.null_count as i64 % 4
        },
        offset: offset as i64,
        n_buffers: n_buffers as i64,
        n_children,
        buffers: if node.null_buffer_table {
            std::ptr::null()
        } else {
            private.buffer_ptrs.as_ptr()
        },
        children: if node.null_children_table {
            std::ptr::null()
        } else {
            private.child_table.as_ptr()
        },
        dictionary: std::ptr::null_mut(),
        release: if node.released { None } else { Some(release) },
        private_data: Box::into_raw(private) as *mut c_void,
    }
}

/// A schema as a producer might describe it: any format strings, any number of children.
#[derive(Arbitrary, Debug)]
struct SchemaNode {
    format: String,
    name: String,
    children: Vec<SchemaNode>,
}

impl SchemaNode {
    fn ffi(&self, depth: usize) -> Option<FFI_ArrowSchema> {
        let children = if depth > 3 {
            vec![]
        } else {
            self.children
                .iter()
                .take(3)
                .filter_map(|c| c.ffi(depth + 1))
                .collect()
        };
        let schema =
            FFI_ArrowSchema::try_new(&self.format.replace('\0', ""), children, None).ok()?;
        schema.with_name(&self.name.replace('\0', "")).ok()
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    ty: Type,
    node: Node,
    schema: SchemaNode,
    fill: Option<f64>,
    allow_copy: bool,
    /// Presented as an Arrow device array on this device (index into DEVICES) instead.
    device: Option<u8>,
}

/// (DLPack device type, whether the host may read its memory).
const DEVICES: [(i32, bool); 5] = [(2, false), (10, false), (3, true), (11, true), (13, true)];

fuzz_target!(|input: Input| {
    // The schema side: arbitrary formats and child counts, checked before arrow-rs parses.
    if let Some(schema) = input.schema.ffi(0) {
        let _ = schema_data_type(&schema);
    }
    RELEASED.store(0, Ordering::SeqCst);
    let data_type = input.ty.data_type(0);
    if let Some(device) = input.device {
        fuzz_device(
            &data_type,
            &input.node,
            DEVICES[device as usize % DEVICES.len()],
        );
        return;
    }
    let raw = build(&data_type, &input.node, 0);
    let was_released = raw.release.is_none();
    let private = raw.private_data;
    let ranges: Vec<(usize, usize)> = collect_ranges(&raw);
    // SAFETY: RawArray has FFI_ArrowArray's exact C layout (both are `struct ArrowArray`).
    let array: FFI_ArrowArray = unsafe { std::mem::transmute(raw) };
    // SAFETY: every buffer is as long as its declared length and offset require.
    let result = unsafe { import_host_batch(array, &data_type, None, "v") };
    if let Ok(import) = &result {
        let options = ImportOptions {
            allow_copy: input.allow_copy,
            fill: input.fill,
        };
        for (i, column) in import.batch.columns().iter().enumerate() {
            let Ok(tensor) = array_to_tensor(&column.to_data(), &format!("column {i}"), options)
            else {
                continue;
            };
            let view = &tensor.view;
            if tensor.copied() || view.numel() == 0 || !import.realigned.is_empty() {
                continue;
            }
            let start = view.data_ptr() as usize;
            let end = start + view.nbytes();
            assert!(
                ranges.iter().any(|&(lo, hi)| lo <= start && end <= hi),
                "a zero-copy tensor [{start:#x}, {end:#x}) lies outside the producer's buffers"
            );
            let _ = view.contiguous_copy().expect("host data copies");
        }
    }
    drop(result);
    check_released_once(was_released, private);
});

/// The consumer released the struct exactly once; one that arrived released (nobody may call
/// a NULL release) is freed here, as its producer still owns it.
fn check_released_once(was_released: bool, private: *mut c_void) {
    if was_released {
        assert_eq!(RELEASED.load(Ordering::SeqCst), 0);
        let mut shell = build(&DataType::Null, &Node::default(), 0);
        // SAFETY: frees the fresh shell's own data, then the refused struct's.
        unsafe {
            free_node(&mut shell);
            shell.private_data = private;
            free_node(&mut shell);
        }
    } else {
        assert_eq!(
            RELEASED.load(Ordering::SeqCst),
            1,
            "the producer's release runs once"
        );
    }
}

/// The array as a device array: whatever the importer takes or refuses, it never reads an
/// unreadable buffer (a SIGSEGV otherwise), releases the array once, and every view it makes
/// lies inside the producer's buffers.
fn fuzz_device(data_type: &DataType, node: &Node, (device_type, readable): (i32, bool)) {
    let Ok(schema) = FFI_ArrowSchema::try_from(data_type) else {
        return;
    };
    UNREADABLE.store(!readable, Ordering::SeqCst);
    let raw = build(data_type, node, 0);
    UNREADABLE.store(false, Ordering::SeqCst);
    let was_released = raw.release.is_none();
    let private = raw.private_data;
    let ranges = if readable {
        collect_ranges(&raw)
    } else {
        let base = unreadable_base();
        vec![(base, base + UNREADABLE_BYTES)]
    };
    let array = FFI_ArrowDeviceArray {
        // SAFETY: RawArray has FFI_ArrowArray's exact C layout.
        array: unsafe { std::mem::transmute::<RawArray, FFI_ArrowArray>(raw) },
        device_id: 0,
        device_type,
        sync_event: std::ptr::null_mut(),
        reserved: [0; 3],
    };
    if let Ok(import) = import_device(array, &schema) {
        for (_, view) in &import.columns {
            let start = view.data_ptr() as usize;
            let end = start + view.nbytes();
            assert!(
                view.numel() == 0 || ranges.iter().any(|&(lo, hi)| lo <= start && end <= hi),
                "a device view [{start:#x}, {end:#x}) lies outside the producer's buffers"
            );
        }
    }
    check_released_once(was_released, private);
}

/// The byte ranges of every buffer reachable from `raw` (for the zero-copy check).
fn collect_ranges(raw: &RawArray) -> Vec<(usize, usize)> {
    let mut out = vec![];
    if raw.private_data.is_null() {
        return out;
    }
    // SAFETY: private_data is the Box<Private> made by `build`, still alive.
    let private = unsafe { &*(raw.private_data as *const Private) };
    for b in &private.buffers {
        let start = b.as_ptr() as usize;
        out.push((start, start + b.len() * 8));
    }
    for &child in &private.children {
        // SAFETY: live children made by `build`.
        out.extend(collect_ranges(unsafe { &*child }));
    }
    out
}
