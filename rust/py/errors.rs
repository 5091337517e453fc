//! Python exception types for engine errors.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;

use crate::error::EngineError;

create_exception!(
    toolsched._core,
    SchemaError,
    PyValueError,
    "A tool's input schema is not a valid, self-contained JSON Schema."
);
create_exception!(
    toolsched._core,
    ToolNameError,
    PyValueError,
    "A tool name or alias is malformed or used twice."
);
create_exception!(
    toolsched._core,
    OptionError,
    PyValueError,
    "An option is out of its range."
);
create_exception!(
    toolsched._core,
    AssemblyError,
    PyRuntimeError,
    "The results of a turn do not answer every call exactly once."
);

impl From<EngineError> for PyErr {
    fn from(err: EngineError) -> Self {
        let message = err.to_string();
        match err {
            EngineError::InvalidSchema { .. } => SchemaError::new_err(message),
            EngineError::DuplicateName { .. } | EngineError::InvalidOption { option: "name", .. } => {
                ToolNameError::new_err(message)
            }
            EngineError::InvalidOption { .. } => OptionError::new_err(message),
            EngineError::Assembly(_) => AssemblyError::new_err(message),
        }
    }
}
