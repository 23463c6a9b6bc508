//! Runs of views one strided view stacks (Miri runs these): members that walk one memory at
//! a fixed pitch stack, anything else breaks the run, and the stacked view's rows are the
//! members, address, shape and strides.

use super::stack::stacked_runs;
use crate::dtype::DType;
use crate::tensor::TensorView;

/// Rows `rows` of a fresh (8, 5) float32 matrix: 1-d members 5 elements apart.
fn rows_of(base: &TensorView, rows: &[i64]) -> Vec<TensorView> {
    rows.iter().map(|&r| base.select(0, r).unwrap()).collect()
}

fn spans(views: &[TensorView]) -> Vec<(usize, usize, bool)> {
    stacked_runs(views)
        .iter()
        .map(|r| (r.start, r.len, r.stacked.is_some()))
        .collect()
}

#[test]
fn evenly_spaced_members_of_one_memory_stack_into_one_view_whose_rows_are_them() {
    let base = TensorView::zeros(DType::F32, &[8, 5]).unwrap();
    let members = rows_of(&base, &[1, 3, 5, 7]);
    let runs = stacked_runs(&members);
    assert_eq!(runs.len(), 1);
    let stacked = runs[0].stacked.as_ref().unwrap();
    assert_eq!(stacked.shape(), &[4, 5]);
    assert_eq!(stacked.strides(), &[10, 1]);
    for (k, member) in members.iter().enumerate() {
        let row = stacked.select(0, k as i64).unwrap();
        assert_eq!(row.data_ptr(), member.data_ptr(), "member {k}");
        assert_eq!(row.shape(), member.shape());
        assert_eq!(row.strides(), member.strides());
    }
}

#[test]
fn a_change_of_pitch_order_or_layout_starts_a_new_run() {
    let base = TensorView::zeros(DType::F32, &[8, 5]).unwrap();
    // 0, 1, 2 at one pitch; 4, 6 at another; then backwards (7, 5) and a repeat (5, 5).
    let members = rows_of(&base, &[0, 1, 2, 4, 6, 7, 5, 5]);
    assert_eq!(
        spans(&members),
        vec![
            (0, 3, true),
            (3, 2, true),
            (5, 1, false),
            (6, 1, false),
            (7, 1, false)
        ]
    );
    // Same pitch, but one member is read-only, another has other strides.
    let mut mixed = rows_of(&base, &[0, 1, 2, 3]);
    mixed[2] = mixed[2].clone().into_readonly();
    assert_eq!(
        spans(&mixed),
        vec![(0, 2, true), (2, 1, false), (3, 1, false)]
    );
    let strided = base.slice_axis(1, 0, 5, 2).unwrap();
    let mut other = rows_of(&base, &[0, 1]);
    other.push(strided.select(0, 2).unwrap());
    assert_eq!(spans(&other), vec![(0, 2, true), (2, 1, false)]);
}

#[test]
fn members_of_different_memories_never_stack_even_at_a_fixed_pitch() {
    let a = TensorView::zeros(DType::F32, &[4, 5]).unwrap();
    let b = TensorView::zeros(DType::F32, &[4, 5]).unwrap();
    let members = vec![a.select(0, 0).unwrap(), b.select(0, 0).unwrap()];
    assert_eq!(spans(&members), vec![(0, 1, false), (1, 1, false)]);
    assert!(stacked_runs(&[]).is_empty());
}

#[test]
fn a_pitch_that_is_not_a_whole_number_of_elements_does_not_stack() {
    // complex64 needs 4-byte alignment but takes 8 bytes: members 12 bytes apart are
    // aligned, yet no element stride reaches from one to the next; 16 bytes apart they stack.
    let base = TensorView::zeros(DType::F32, &[12]).unwrap();
    let at = |bytes: usize| {
        // SAFETY: two complex64 elements (16 bytes) from `bytes` ≤ 32 lie inside the 48
        // bytes of `base`, whose owner the view keeps.
        unsafe {
            TensorView::from_raw_parts(
                base.data_ptr().add(bytes),
                DType::C64,
                vec![2],
                vec![1],
                base.device(),
                base.owner().clone(),
                false,
            )
        }
        .unwrap()
    };
    let odd = vec![at(0), at(12), at(24)];
    assert_eq!(
        spans(&odd),
        vec![(0, 1, false), (1, 1, false), (2, 1, false)]
    );
    let whole = vec![at(0), at(16), at(32)];
    let runs = stacked_runs(&whole);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].stacked.as_ref().unwrap().strides(), &[2, 1]);
}
