//! A coroutine's steps, taken by hand as a task takes them: the first in a
//! copy of the current context (or of a given one), each later one in that
//! copy, without the `StopIteration` a Python-level `send` raises when the
//! coroutine finishes.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Runs `coroutine` up to its first suspension in a copy of the current
/// context, or of `base` when given (a `contextvars.Context`).
///
/// Returns `finished` when the coroutine returned in that step (its return
/// value is dropped), else `(yielded, context)`: what it yielded and the
/// context copy it runs in, for the rest of it. An exception it raises
/// propagates. The same as `context.run(coroutine.send, None)` with
/// `StopIteration` caught, without making and catching the exception: most
/// calls never wait, and finish in this one step.
#[pyfunction]
#[pyo3(signature = (coroutine, base, finished))]
pub fn start<'py>(
    py: Python<'py>,
    coroutine: &Bound<'py, PyAny>,
    base: Option<&Bound<'py, PyAny>>,
    finished: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the interpreter is attached (we hold `py`); `base` is checked to be a Context before it
    // is copied, and the new reference either call returns is owned by a `Bound` at once.
    let context = unsafe {
        let copied = match base {
            None => ffi::PyContext_CopyCurrent(),
            Some(base) if ffi::PyContext_CheckExact(base.as_ptr()) != 0 => ffi::PyContext_Copy(base.as_ptr()),
            Some(_) => return Err(PyTypeError::new_err("base must be a contextvars.Context or None")),
        };
        Bound::from_owned_ptr_or_err(py, copied)?
    };
    let (result, returned) = step(py, &context, coroutine, &py.None().into_bound(py))?;
    if returned {
        return Ok(finished.clone());
    }
    Ok(PyTuple::new(py, [result, context.into_any()])?.into_any())
}

/// What a coroutine returned, as `send` hands it back.
#[pyclass(frozen, module = "toolsched._core", name = "Returned")]
pub struct PyReturned {
    #[pyo3(get)]
    value: Py<PyAny>,
}

/// Sends `value` into `coroutine` in `context` (a `contextvars.Context`, not
/// entered now): returns what it yielded next, or a `Returned` holding what
/// it returned. An exception it raises propagates. The same as
/// `context.run(coroutine.send, value)` with `StopIteration` caught.
#[pyfunction]
pub fn send<'py>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    coroutine: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the interpreter is attached (we hold `py`) and `context` is a live object.
    if unsafe { ffi::PyContext_CheckExact(context.as_ptr()) } == 0 {
        return Err(PyTypeError::new_err("context must be a contextvars.Context"));
    }
    let (result, returned) = step(py, context, coroutine, value)?;
    if returned {
        return Ok(Bound::new(py, PyReturned { value: result.unbind() })?.into_any());
    }
    Ok(result)
}

/// One step of `coroutine` in `context` (a Context, not entered now), sent
/// `value`: what it yielded or returned, and whether it returned.
fn step<'py>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    coroutine: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, bool)> {
    // SAFETY: the interpreter is attached (we hold `py`); `context` is a Context (both callers check
    // or made it); every pointer is a live object borrowed for the call, and `result` a new reference
    // owned by a `Bound` at once (null only on an error, which returns before it is read).
    unsafe {
        if ffi::PyContext_Enter(context.as_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        let mut result: *mut ffi::PyObject = std::ptr::null_mut();
        let status = ffi::PyIter_Send(coroutine.as_ptr(), value.as_ptr(), &raw mut result);
        // The coroutine's error is taken before the context is left, which may set one of its own.
        let error = matches!(status, ffi::PySendResult::PYGEN_ERROR).then(|| PyErr::fetch(py));
        let left = ffi::PyContext_Exit(context.as_ptr());
        if let Some(error) = error {
            return Err(error);
        }
        let result = Bound::from_owned_ptr(py, result);
        if left < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok((result, matches!(status, ffi::PySendResult::PYGEN_RETURN)))
    }
}
