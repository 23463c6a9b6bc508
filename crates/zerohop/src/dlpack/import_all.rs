//! Several managed tensors handed over at once (a C caller's array of columns): each distinct
//! one is taken exactly once, whatever is wrong with the others, so every deleter runs once.

use std::collections::hash_map::{Entry, HashMap};
use std::ptr::NonNull;

use super::ffi::DLManagedTensorVersioned;
use super::import::import_versioned;
use crate::error::{Error, Result};
use crate::tensor::TensorView;

/// Takes ownership of every tensor in `given` (`what` names one in errors: "column tensor")
/// and returns their views in order. All of them are taken before any error is returned, so on
/// an error every deleter has run. The same tensor at two positions would have its deleter run
/// twice (a use after free): that is refused, naming both positions, and its deleter runs once.
/// A NULL entry is an error naming its position.
///
/// # Safety
/// Each non-NULL entry points to a live `DLManagedTensorVersioned` whose ownership passes to
/// this call (an entry repeated passes it once), with fields as DLPack specifies.
pub unsafe fn import_all_versioned(
    given: &[*mut DLManagedTensorVersioned],
    what: &str,
) -> Result<Vec<TensorView>> {
    let invalid = |reason: String| Error::InvalidArgument {
        what: what.to_string(),
        reason,
    };
    let mut first_at = HashMap::with_capacity(given.len());
    let mut first_error = None;
    let mut views = Vec::with_capacity(given.len());
    for (i, &managed) in given.iter().enumerate() {
        let Some(managed) = NonNull::new(managed) else {
            first_error.get_or_insert_with(|| invalid(format!("{what} {i} is NULL")));
            continue;
        };
        match first_at.entry(managed) {
            Entry::Occupied(first) => {
                first_error.get_or_insert_with(|| {
                    invalid(format!(
                        "{what}s {} and {i} are the same managed tensor: each is adopted once \
                         (its deleter runs once); export one per column",
                        first.get()
                    ))
                });
                continue; // taken already, at its first position
            }
            Entry::Vacant(slot) => {
                slot.insert(i);
            }
        }
        // SAFETY: per the contract, taken once (repeats are skipped above); on error the
        // import has run the deleter.
        match unsafe { import_versioned(managed) } {
            Ok(imported) => views.push(imported.view),
            Err(e) => {
                first_error.get_or_insert_with(|| invalid(format!("{what} {i}: {e}")));
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(views),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::dlpack::{export_versioned, ExportOptions};

    fn exported(view: &TensorView) -> *mut DLManagedTensorVersioned {
        export_versioned(view, ExportOptions::default())
            .unwrap()
            .as_ptr()
    }

    #[test]
    fn distinct_tensors_are_taken_in_order_by_pointer() {
        let (a, b) = (
            TensorView::from_slice(&[1.0f32, 2.0], &[2]).unwrap(),
            TensorView::from_slice(&[3i64], &[1]).unwrap(),
        );
        // SAFETY: fresh exports, each passed once.
        let views = unsafe { import_all_versioned(&[exported(&a), exported(&b)], "t") }.unwrap();
        assert_eq!(views[0].data_ptr(), a.data_ptr());
        assert_eq!(views[1].data_ptr(), b.data_ptr());
    }

    #[test]
    fn a_tensor_given_twice_is_refused_and_every_deleter_runs_once() {
        let view = TensorView::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
        let other = TensorView::from_slice(&[5u8], &[1]).unwrap();
        let (once, twice) = (exported(&other), exported(&view));
        assert_eq!(
            Arc::strong_count(view.owner()),
            2,
            "the export holds the view"
        );
        // SAFETY: the repeat passes its ownership once; the NULL is what is under test.
        let err = unsafe {
            import_all_versioned(&[twice, once, twice, std::ptr::null_mut()], "column tensor")
        }
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("column tensors 0 and 2 are the same managed tensor"),
            "{err}"
        );
        assert_eq!(Arc::strong_count(view.owner()), 1, "its deleter ran once");
        assert_eq!(Arc::strong_count(other.owner()), 1, "and the other's too");
        // SAFETY: an empty array and one NULL entry take nothing.
        let err = unsafe { import_all_versioned(&[std::ptr::null_mut()], "t") }.unwrap_err();
        assert!(err.to_string().contains("t 0 is NULL"), "{err}");
    }
}
