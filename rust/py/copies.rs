//! Copies of a call's input for the code that may keep or change them:
//! hooks, guardrails, approvers, batch hooks and saved run state.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

static DEEPCOPY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A copy of a call's input that shares nothing mutable with the original.
///
/// A dict whose values are each exactly text, an int, a float, a bool or
/// None (the usual input) is copied shallowly, since none of its values can
/// change; anything else goes to `copy.deepcopy`.
#[pyfunction]
pub fn detached<'py>(py: Python<'py>, args: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(dict) = args.cast_exact::<PyDict>() {
        // Only type checks run while the dict is walked: no Python code can change it meanwhile.
        if dict.iter().all(|(_, value)| is_scalar(&value)) {
            return Ok(dict.copy()?.into_any());
        }
    }
    DEEPCOPY.import(py, "copy", "deepcopy")?.call1((args,))
}

fn is_scalar(value: &Bound<'_, PyAny>) -> bool {
    value.is_exact_instance_of::<PyString>()
        || value.is_exact_instance_of::<PyInt>()
        || value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyBool>()
        || value.is_none()
}
