//! No panic crosses the C boundary: every entry point the header declares runs inside the
//! guard, so a panic inside zerohop is a status (or, for calls that return no status, a
//! documented fallback) and a message, never an abort. Host memory only: runs under Miri.
//!
//! The panics are injected through `zerohop_capi::injection` (the crate's test-only feature
//! `panic-injection`, turned on by its dev-dependency on itself), plus one real one: a memory
//! resource that panics, reached through `zh_table_new` and `zh_table_free`.

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut, NonNull};
use std::sync::Arc;

use zerohop::memory::{
    reset_current_resource, set_current_resource, MemoryResource, Stream, SystemResource,
};
use zerohop::Device;
use zerohop_capi::injection::{armed, panic_in_next_call};
use zerohop_capi::*;

mod common;
use common::{c, last_error};

/// What an entry point returned, made comparable.
#[derive(Debug, PartialEq)]
enum Returned {
    Status(zh_status),
    Pointer(bool), // whether non-NULL
    Number(u64),
    Nothing,
}

use Returned::{Nothing, Number, Pointer, Status};

/// An entry point called with NULL and zero arguments.
type Call = fn() -> Returned;

fn pointer(p: *mut c_void) -> Returned {
    Pointer(!p.is_null())
}
fn text(p: *const c_char) -> Returned {
    Pointer(!p.is_null())
}
fn number(n: usize) -> Returned {
    Number(n as u64)
}
fn flag(b: bool) -> Returned {
    Number(b.into())
}
fn nothing((): ()) -> Returned {
    Nothing
}

/// `(name, call)`: the entry point `f` called with `args`, its result made a [`Returned`] by
/// `wrap`.
macro_rules! call {
    ($wrap:expr, $f:ident($($arg:expr),*)) => {
        (stringify!($f), (|| {
            // SAFETY: a panic is armed, so the call panics at the start of its guard, before
            // any of its NULL or zero arguments is used. (The three safe calls need none.)
            #[allow(unused_unsafe)]
            let returned = unsafe { $f($($arg),*) };
            ($wrap)(returned)
        }) as Call)
    };
}

/// Every entry point of include/zerohop.h, called with NULL and zero arguments, and what it
/// must return after a panic.
fn entry_points() -> Vec<(&'static str, Returned, Call)> {
    let calls = [
        call!(text, zh_version()),
        call!(|v: u32| Number(v.into()), zh_dlpack_version()),
        call!(text, zh_last_error()),
        call!(Status, zh_map_new(null(), 0, null_mut())),
        call!(nothing, zh_map_free(null_mut())),
        call!(Status, zh_map_apply(null(), null(), null_mut())),
        call!(Status, zh_table_map(null(), null(), 0, null_mut())),
        call!(nothing, zh_tensors_free(null_mut())),
        call!(number, zh_tensors_len(null())),
        call!(text, zh_tensors_name(null(), 0)),
        call!(flag, zh_tensors_copied(null(), 0)),
        call!(text, zh_tensors_copy_reason(null(), 0)),
        call!(Status, zh_tensors_export(null(), 0, null_mut())),
        call!(Status, zh_tensors_view(null(), 0, null_mut())),
        call!(Status, zh_tensors_verify_unwritten(null(), 0)),
        call!(Status, zh_resource_system(null_mut())),
        call!(Status, zh_resource_cuda_device(0, null_mut())),
        call!(Status, zh_resource_pool(null(), 0, 0, null_mut())),
        call!(Status, zh_resource_stats(null(), null_mut())),
        call!(Status, zh_resource_statistics(null(), null_mut())),
        call!(Status, zh_resource_current(null(), null_mut())),
        call!(Status, zh_resource_set_current(null())),
        call!(nothing, zh_resource_free(null_mut())),
        call!(Status, zh_allocate(null(), 0, 0, 0, null_mut())),
        call!(Status, zh_deallocate(null(), null_mut(), 0, 0, 0)),
        call!(pointer, zh_cuda_malloc(0, -1, null_mut())),
        call!(nothing, zh_cuda_free(null_mut(), 0, -1, null_mut())),
        call!(Status, zh_table_rows(null(), 0, 0, null_mut())),
        call!(Status, zh_table_column_info(null(), null(), null_mut())),
        call!(Status, zh_table_batch_count(null(), 0, null_mut())),
        call!(Status, zh_table_batch(null(), 0, 0, null_mut())),
        call!(Status, zh_schema_layout(null(), 0, 0, null_mut())),
        call!(Status, zh_schema_column_layout(null(), 0, 0, 0, null_mut())),
        call!(Status, zh_schema_new(null_mut())),
        call!(nothing, zh_schema_free(null_mut())),
        call!(Status, zh_schema_add_column(null_mut(), null(), null())),
        call!(Status, zh_schema_add_scalar(null_mut(), null(), null())),
        call!(Status, zh_schema_add_vector(null_mut(), null(), null(), 0)),
        call!(
            Status,
            zh_schema_add_matrix(null_mut(), null(), null(), 0, 0, 9)
        ),
        call!(number, zh_schema_len(null())),
        call!(Status, zh_table_set_stream(null_mut(), 0)),
        call!(Status, zh_table_get_stream(null(), null_mut())),
        call!(
            Status,
            zh_map_apply_on_stream(null(), null(), 0, null_mut())
        ),
        call!(Status, zh_table_new(null(), 0, 0, null(), null_mut())),
        call!(
            Status,
            zh_table_wrap(
                null(),
                0,
                0,
                null_mut(),
                0,
                -1,
                None,
                null_mut(),
                null_mut()
            )
        ),
        call!(
            Status,
            zh_blocks_layout(null(), null(), 0, 0, null_mut(), null_mut())
        ),
        call!(
            Status,
            zh_blocks_wrap(
                null(),
                null(),
                0,
                0,
                null_mut(),
                0,
                -1,
                None,
                null_mut(),
                null_mut()
            )
        ),
        call!(nothing, zh_table_free(null_mut())),
        call!(Status, zh_table_get_info(null(), null_mut())),
        call!(Status, zh_table_column(null(), null(), null_mut())),
        call!(Status, zh_table_export(null(), null_mut())),
        call!(
            Status,
            zh_table_write_column(null_mut(), null(), null_mut())
        ),
        call!(Status, zh_table_from_columns(null(), null(), 0, null_mut())),
    ];
    let fallback = |name: &str| match name {
        // Calls without a status return what they document for a failure.
        "zh_version" | "zh_last_error" => Pointer(true),
        "zh_dlpack_version" => Number(103),
        "zh_tensors_name" | "zh_tensors_copy_reason" | "zh_cuda_malloc" => Pointer(false),
        "zh_tensors_len" | "zh_tensors_copied" | "zh_schema_len" => Number(0),
        n if n.ends_with("_free") => Nothing,
        _ => Status(zh_status::ZH_INTERNAL),
    };
    calls
        .into_iter()
        .map(|(name, call)| (name, fallback(name), call))
        .collect()
}

/// The functions include/zerohop.h declares (cbindgen writes one declaration a line).
fn declared() -> Vec<String> {
    include_str!("../../../include/zerohop.h")
        .lines()
        .filter(|l| !l.starts_with([' ', '/', '#', '*']) && !l.starts_with("typedef"))
        .filter(|l| l.ends_with(");"))
        .filter_map(|l| l.split('(').next()?.rsplit([' ', '*']).next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_entry_point_turns_an_injected_panic_into_a_status_and_a_message() {
    let mut tested: Vec<String> = Vec::new();
    for (name, expected, call) in entry_points() {
        panic_in_next_call(name);
        let returned = call();
        assert!(
            !armed(),
            "{name} ran no guard: the panic was never injected"
        );
        assert_eq!(returned, expected, "{name}");
        let says = last_error();
        assert!(
            says.contains("internal error in zerohop") && says.contains(name),
            "{name}: {says}"
        );
        tested.push(name.to_owned());
    }
    let mut declared = declared();
    declared.sort();
    tested.sort();
    assert!(declared.len() > 40, "the header parse found {declared:?}");
    assert_eq!(
        tested, declared,
        "every entry point of the header is tested here"
    );
}

/// A host resource that panics: on allocation, or after a real free.
#[derive(Debug)]
struct Panicking {
    on_allocate: bool,
    system: SystemResource,
}

impl MemoryResource for Panicking {
    fn allocate(&self, bytes: usize, align: usize, stream: Stream) -> zerohop::Result<NonNull<u8>> {
        assert!(!self.on_allocate, "a resource bug on allocate");
        self.system.allocate(bytes, align, stream)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, bytes: usize, align: usize, stream: Stream) {
        // SAFETY: the caller's contract, passed on: the block came from `self.system`.
        unsafe { self.system.deallocate(ptr, bytes, align, stream) };
        panic!("a resource bug on deallocate");
    }

    fn device(&self) -> Device {
        Device::CPU
    }
}

fn install(on_allocate: bool) {
    let resource = Panicking {
        on_allocate,
        system: SystemResource::new(),
    };
    set_current_resource(Device::CPU, Arc::new(resource));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a panic out of a drop leaks the Arc's block, which Miri reports"
)]
fn a_resource_that_panics_is_zh_internal_not_an_abort() {
    let mut schema = null_mut();
    let untouched = NonNull::<zh_table>::dangling().as_ptr();
    let (mut refused, mut table) = (untouched, null_mut());
    // SAFETY: live schema; the current host resource is this test's (no other test of this
    // file allocates through it).
    unsafe {
        assert_eq!(zh_schema_new(&mut schema), zh_status::ZH_OK);
        let (name, dtype) = (c("x"), c("float32"));
        assert_eq!(
            zh_schema_add_column(schema, name.as_ptr(), dtype.as_ptr()),
            zh_status::ZH_OK
        );
        install(true);
        let status = zh_table_new(schema, 8, 0, null(), &mut refused);
        assert_eq!(status, zh_status::ZH_INTERNAL);
        assert!(last_error().contains("a resource bug on allocate"));
        assert_eq!(refused, untouched, "*out untouched");

        install(false);
        assert_eq!(
            zh_table_new(schema, 8, 0, null(), &mut table),
            zh_status::ZH_OK
        );
        zh_table_free(table); // the free panics: recorded, and the call returns
        assert!(
            last_error().contains("a resource bug on deallocate"),
            "{}",
            last_error()
        );
        reset_current_resource(Device::CPU);
        zh_schema_free(schema);
    }
    // The thread and the library go on working.
    // SAFETY: zh_version returns a static string.
    assert_eq!(
        unsafe { CStr::from_ptr(zh_version()) }.to_str(),
        Ok("0.1.0")
    );
}
