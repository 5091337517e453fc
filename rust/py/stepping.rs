//! A coroutine's steps, taken by hand as a task takes them: the first in a
//! copy of the current context (or of a given one), each later one in that
//! copy (awaiting a `Resume`), without the `StopIteration` a Python-level
//! `send` raises when the coroutine finishes.

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::{PyTraverseError, PyVisit};

/// Runs `coroutine` up to its first suspension in a copy of the current
/// context, or of `base` when given (a `contextvars.Context`).
///
/// Returns None when the coroutine returned in that step (its return value is
/// dropped), else a `Resume` that awaits the rest of it in the same copy. An
/// exception it raises propagates. The same as `context.run(coroutine.send,
/// None)` with `StopIteration` caught, without making and catching the
/// exception: most calls never wait, and finish in this one step.
#[pyfunction]
#[pyo3(signature = (coroutine, base=None))]
pub fn start<'py>(
    py: Python<'py>,
    coroutine: &Bound<'py, PyAny>,
    base: Option<&Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyResume>>> {
    // SAFETY: the interpreter is attached (we hold `py`); `base` is checked to be a Context before it
    // is copied, and the new reference either call returns is owned by a `Bound` at once.
    let context = unsafe {
        let copied = match base {
            None => ffi::PyContext_CopyCurrent(),
            Some(base) if ffi::PyContext_CheckExact(base.as_ptr()) != 0 => ffi::PyContext_Copy(base.as_ptr()),
            Some(_) => {
                // `start` takes the coroutine: one it cannot run is closed, not left to be never awaited.
                coroutine.call_method0("close")?;
                return Err(PyTypeError::new_err("base must be a contextvars.Context or None"));
            }
        };
        Bound::from_owned_ptr_or_err(py, copied)?
    };
    let first = match step(py, &context, coroutine, &py.None().into_bound(py))? {
        Step::Returned(_) => return Ok(None),
        Step::Yielded(first) => first,
    };
    let resume = PyResume {
        coroutine: Some(coroutine.clone().unbind()),
        context: Some(context.unbind()),
        first: Some(first.unbind()),
        awaited: false,
    };
    Ok(Some(Bound::new(py, resume)?))
}

/// The rest of a coroutine that `start` stepped and that suspended: awaiting
/// it hands what the coroutine yielded first, and everything after, to the
/// event loop unchanged, and everything sent or thrown back in to the
/// coroutine, each step in the coroutine's own copy of the context; the await
/// gives what the coroutine returned. So it behaves as a plain `await` of the
/// coroutine, on asyncio and trio alike (cancellation included).
#[pyclass(module = "toolsched._core", name = "Resume")]
pub struct PyResume {
    // None once cleared by the cyclic collector.
    coroutine: Option<Py<PyAny>>,
    context: Option<Py<PyAny>>,
    // What the first step yielded, until it is handed on.
    first: Option<Py<PyAny>>,
    // Set once it is awaited: as a coroutine, it is awaited once (a second awaiter would step it too).
    awaited: bool,
}

/// A `Resume`'s coroutine and context, borrowed for one step, and its first yield if not handed on yet.
struct Parts<'py> {
    coroutine: Bound<'py, PyAny>,
    context: Bound<'py, PyAny>,
    first: Option<Bound<'py, PyAny>>,
}

/// What one step of the coroutine gave.
enum Step<'py> {
    Yielded(Bound<'py, PyAny>),
    Returned(Bound<'py, PyAny>),
}

impl PyResume {
    /// The coroutine and its context, and the first yield if it was not handed on yet (taken now). The
    /// borrow ends here: the coroutine runs without it.
    fn parts<'py>(slf: &Bound<'py, Self>) -> PyResult<Parts<'py>> {
        let py = slf.py();
        let mut this = slf.try_borrow_mut()?;
        let first = this.first.take().map(|first| first.into_bound(py));
        match (&this.coroutine, &this.context) {
            (Some(coroutine), Some(context)) => Ok(Parts {
                coroutine: coroutine.bind(py).clone(),
                context: context.bind(py).clone(),
                first,
            }),
            _ => Err(PyRuntimeError::new_err("the awaited coroutine was cleared")),
        }
    }

    /// The next step, sent `value` (the first hands on what `start` saw yielded).
    fn advance<'py>(slf: &Bound<'py, Self>, value: &Bound<'py, PyAny>) -> PyResult<Step<'py>> {
        if !value.is_none() && slf.try_borrow()?.first.is_some() {
            // As a coroutine not yet awaited: its awaiter's first step sends None.
            return Err(PyTypeError::new_err(
                "can't send non-None value to a just-started coroutine",
            ));
        }
        let parts = Self::parts(slf)?;
        if let Some(first) = parts.first {
            return Ok(Step::Yielded(first));
        }
        step(slf.py(), &parts.context, &parts.coroutine, value)
    }

    /// `context.run(coroutine.<name>, *args)`.
    fn run_method<'py>(slf: &Bound<'py, Self>, name: &str, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        let parts = Self::parts(slf)?;
        let mut call = vec![parts.coroutine.getattr(name)?];
        call.extend(args.iter());
        parts.context.call_method1("run", PyTuple::new(slf.py(), call)?)
    }
}

#[pymethods]
impl PyResume {
    fn __await__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        if slf.awaited {
            return Err(PyRuntimeError::new_err(
                "this coroutine is awaited already (a Resume is awaited once)",
            ));
        }
        slf.awaited = true;
        Ok(slf)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next step, sent None: what the coroutine yields, or the end of the await.
    fn __next__<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match Self::advance(slf, &slf.py().None().into_bound(slf.py()))? {
            Step::Yielded(yielded) => Ok(Some(yielded)),
            // The end without a value needs no exception object (the interpreter reads it as None).
            Step::Returned(returned) if returned.is_none() => Ok(None),
            Step::Returned(returned) => Err(PyStopIteration::new_err((returned.unbind(),))),
        }
    }

    /// The next step, sent `value`: what the coroutine yields; `StopIteration` with what it returned.
    fn send<'py>(slf: &Bound<'py, Self>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match Self::advance(slf, value)? {
            Step::Yielded(yielded) => Ok(yielded),
            // As a coroutine's `send`: a return of None is a `StopIteration` with no arguments.
            Step::Returned(returned) if returned.is_none() => Err(PyStopIteration::new_err(())),
            Step::Returned(returned) => Err(PyStopIteration::new_err((returned.unbind(),))),
        }
    }

    /// Throws into the coroutine (in its context): what it yields next, or what ends it.
    #[pyo3(signature = (*args))]
    fn throw<'py>(slf: &Bound<'py, Self>, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        Self::run_method(slf, "throw", args)
    }

    /// Closes the coroutine (in its context).
    fn close<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::run_method(slf, "close", &PyTuple::empty(slf.py()))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for held in [&self.coroutine, &self.context, &self.first].into_iter().flatten() {
            visit.call(held)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.coroutine = None;
        self.context = None;
        self.first = None;
    }
}

/// One step of `coroutine` in `context` (a Context, not entered now), sent
/// `value`: what it yielded, or what it returned.
fn step<'py>(
    py: Python<'py>,
    context: &Bound<'py, PyAny>,
    coroutine: &Bound<'py, PyAny>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Step<'py>> {
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
        Ok(if matches!(status, ffi::PySendResult::PYGEN_RETURN) {
            Step::Returned(result)
        } else {
            Step::Yielded(result)
        })
    }
}
