//! Engine errors raised as toolsched's own Python exception classes.
//!
//! The classes live in `toolsched.errors` (all of them `ToolschedError`s, so
//! `except ts.ToolschedError` catches what the engine raises too); the binding
//! imports each once, the first time it raises one.

use pyo3::import_exception;
use pyo3::PyErr;

use crate::error::EngineError;

import_exception!(toolsched.errors, SchemaError);
import_exception!(toolsched.errors, ToolNameError);
import_exception!(toolsched.errors, OptionError);
import_exception!(toolsched.errors, AssemblyError);

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
