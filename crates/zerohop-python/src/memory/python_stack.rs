//! The Python lines behind an allocation, for `Tracking(backtraces=True)` leak reports: a Rust
//! backtrace alone stops at the binding layer, and a Python user needs their own line.

use std::cell::RefCell;

use pyo3::prelude::*;

/// Frames recorded per allocation, innermost first.
const MAX_FRAMES: usize = 12;

extern "C" {
    // Exported by every CPython since 3.4, though pyo3 declares it only outside abi3 builds.
    fn PyGILState_Check() -> std::ffi::c_int;
}

/// Installs [`python_stack`] as the core's allocation-context source.
pub fn install() {
    zerohop::memory::set_allocation_context(python_stack);
}

thread_local! {
    /// The Python lines of a call that released the GIL to allocate (see `detach`).
    static CAPTURED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// `py.detach(f)`, with the calling Python lines kept for the allocations `f` makes when a
/// tracker records them (they run without the GIL, so they could not read the frames).
pub fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    if !zerohop::memory::contexts_recorded() {
        return py.detach(f);
    }
    let lines = frames(py).ok();
    CAPTURED.with(|c| *c.borrow_mut() = lines);
    let result = py.detach(f);
    CAPTURED.with(|c| c.borrow_mut().take());
    result
}

/// "file:line in function" per Python frame of the calling thread, innermost first; the
/// lines `detach` kept when the thread released the GIL; None on other threads.
fn python_stack() -> Option<String> {
    // SAFETY: both functions may be called at any time from any thread; PyGILState_Check says
    // whether this thread holds the GIL, so Python is entered only where it already runs and
    // no allocation ever waits for the GIL.
    let attached = unsafe { pyo3::ffi::Py_IsInitialized() != 0 && PyGILState_Check() == 1 };
    if !attached {
        return CAPTURED.with(|c| c.borrow().clone());
    }
    Python::attach(|py| {
        // An allocation can happen while an exception is being raised: keep it intact.
        let pending = PyErr::take(py);
        let lines = frames(py).ok();
        if let Some(err) = pending {
            err.restore(py);
        }
        lines.filter(|l| !l.is_empty())
    })
}

fn frames(py: Python<'_>) -> PyResult<String> {
    let mut frame = py.import("sys")?.call_method1("_getframe", (0,))?;
    let mut lines = Vec::new();
    while !frame.is_none() && lines.len() < MAX_FRAMES {
        let code = frame.getattr("f_code")?;
        lines.push(format!(
            "{}:{} in {}",
            code.getattr("co_filename")?,
            frame.getattr("f_lineno")?,
            code.getattr("co_name")?
        ));
        frame = frame.getattr("f_back")?;
    }
    Ok(lines.join("\n"))
}
