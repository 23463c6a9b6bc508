//! Runs of tensors that one strided tensor describes: a framework then imports the run once
//! and splits it into its members itself (torch's `unbind`), where importing each member is
//! a DLPack round trip apiece. The columns of an SoA table are such a run: one dtype, one
//! length, each a fixed pitch after the one before.

use std::sync::Arc;

use super::plan::{plan, Allowance, Consumer, Plan};
use crate::tensor::TensorView;

/// Consecutive members `start..start + len` of a list of views, and, when there are at least
/// two, one view whose first axis walks them: `stacked.select(0, k)` is member `start + k`,
/// at its address, with its shape and strides.
#[derive(Clone, Debug)]
pub struct Run {
    pub start: usize,
    pub len: usize,
    pub stacked: Option<TensorView>,
    /// From [`shared_runs`]: the plan vouched that the consumer never writes the members
    /// (read-only memory, shared on the caller's word or to an immutable consumer).
    pub vouched: bool,
}

impl Run {
    /// Member `start` on its own.
    pub fn alone(start: usize) -> Run {
        Run {
            start,
            len: 1,
            stacked: None,
            vouched: false,
        }
    }
}

/// [`stacked_runs`] for handing named views to `consumer`: a run keeps its stacked view only
/// where the plan shares every member alike (`vouched`: the plan's word for all of them);
/// otherwise its members go one by one, each to meet its own plan (a copy or a refusal).
pub fn shared_runs(
    members: &[(&str, &TensorView)],
    consumer: Consumer,
    allow: Allowance,
) -> Vec<Run> {
    let views: Vec<TensorView> = members.iter().map(|(_, v)| (*v).clone()).collect();
    let shared = |(name, view): &(&str, &TensorView)| match plan(name, view, consumer, allow) {
        Ok(Plan::Share { vouched }) => Some(vouched),
        _ => None,
    };
    let mut runs = Vec::new();
    for mut run in stacked_runs(&views) {
        let plans: Vec<Option<bool>> = members[run.start..run.start + run.len]
            .iter()
            .map(shared)
            .collect();
        if run.stacked.is_none() || plans[0].is_none() || plans.iter().any(|p| *p != plans[0]) {
            runs.extend((run.start..run.start + run.len).map(Run::alone));
            continue;
        }
        run.vouched = plans[0] == Some(true);
        runs.push(run);
    }
    runs
}

/// The views, in order, cut into the longest runs that one strided view can stack: members
/// of one memory (one owner), device, dtype, shape, strides and read-only flag, each the same
/// positive whole number of elements after the one before. A member that joins nothing is a
/// run of one, with no stacked view.
pub fn stacked_runs(views: &[TensorView]) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut start = 0;
    while start < views.len() {
        let step = views
            .get(start + 1)
            .and_then(|next| elements_between(&views[start], next));
        let mut len = 1;
        if let Some(step) = step {
            len = 2;
            while let Some(next) = views.get(start + len) {
                if elements_between(&views[start + len - 1], next) != Some(step) {
                    break;
                }
                len += 1;
            }
        }
        let stacked = step.and_then(|step| stack(&views[start], len, step));
        let len = if stacked.is_some() { len } else { 1 };
        runs.push(Run {
            start,
            len,
            stacked,
            vouched: false,
        });
        start += len;
    }
    runs
}

/// How many elements `next` starts after `first`, when the two can share a stacked view.
fn elements_between(first: &TensorView, next: &TensorView) -> Option<i64> {
    let alike = Arc::ptr_eq(first.owner(), next.owner())
        && first.device() == next.device()
        && first.dtype() == next.dtype()
        && first.shape() == next.shape()
        && first.strides() == next.strides()
        && first.is_readonly() == next.is_readonly();
    if !alike {
        return None;
    }
    let bytes = (next.data_ptr() as usize).checked_sub(first.data_ptr() as usize)?;
    let itemsize = first.dtype().itemsize();
    if bytes == 0 || bytes % itemsize != 0 {
        return None;
    }
    i64::try_from(bytes / itemsize).ok()
}

/// `len` copies of `first`'s layout, `step` elements apart, as one view over its memory.
fn stack(first: &TensorView, len: usize, step: i64) -> Option<TensorView> {
    let mut shape = vec![i64::try_from(len).ok()?];
    shape.extend_from_slice(first.shape());
    let mut strides = vec![step];
    strides.extend_from_slice(first.strides());
    // SAFETY: element (k, i…) of this layout is element (i…) of member k, a view of the same
    // owner's memory on the same device (checked pair by pair in `elements_between`): every
    // element it reaches is one the members already reach, valid while the owner lives; the
    // read-only flag is theirs.
    unsafe {
        TensorView::from_raw_parts(
            first.data_ptr(),
            first.dtype(),
            shape,
            strides,
            first.device(),
            first.owner().clone(),
            first.is_readonly(),
        )
    }
    .ok()
}
