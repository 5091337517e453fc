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
    // SAFETY (every block below): the interpreter is attached (we hold `py`), and each pointer is a
    // live object borrowed for the call or a new reference owned by a `Bound` at once.
    let context = unsafe {
        let copied = match base {
            None => ffi::PyContext_CopyCurrent(),
            Some(base) if ffi::PyContext_CheckExact(base.as_ptr()) != 0 => ffi::PyContext_Copy(base.as_ptr()),
            Some(_) => return Err(PyTypeError::new_err("base must be a contextvars.Context or None")),
        };
        Bound::from_owned_ptr_or_err(py, copied)?
    };
    let mut result: *mut ffi::PyObject = std::ptr::null_mut();
    let status = unsafe {
        if ffi::PyContext_Enter(context.as_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        let status = ffi::PyIter_Send(coroutine.as_ptr(), ffi::Py_None(), &raw mut result);
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
        if matches!(status, ffi::PySendResult::PYGEN_RETURN) {
            return Ok(finished.clone());
        }
        result
    };
    Ok(PyTuple::new(py, [status, context.into_any()])?.into_any())
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
    // SAFETY: the interpreter is attached (we hold `py`); every pointer is a live object borrowed
    // for the call, and `result` a new reference owned by a `Bound` at once (null only on an error).
    unsafe {
        if ffi::PyContext_CheckExact(context.as_ptr()) == 0 {
            return Err(PyTypeError::new_err("context must be a contextvars.Context"));
        }
        if ffi::PyContext_Enter(context.as_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        let mut result: *mut ffi::PyObject = std::ptr::null_mut();
        let status = ffi::PyIter_Send(coroutine.as_ptr(), value.as_ptr(), &raw mut result);
        let error = matches!(status, ffi::PySendResult::PYGEN_ERROR).then(|| PyErr::fetch(py));
        let left = ffi::PyContext_Exit(context.as_ptr());
        if let Some(error) = error {
            return Err(error);
        }
        let result = Bound::from_owned_ptr(py, result);
        if left < 0 {
            return Err(PyErr::fetch(py));
        }
        if matches!(status, ffi::PySendResult::PYGEN_RETURN) {
            return Ok(Bound::new(py, PyReturned { value: result.unbind() })?.into_any());
        }
        Ok(result)
    }
}
