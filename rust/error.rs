//! Errors raised by the engine when it is configured or used wrongly.
//!
//! Problems with a single tool call are not errors: they become that call's
//! [`crate::plan::Rejection`], so one bad call never fails a turn.

use thiserror::Error;

/// An error in how the engine was set up or driven.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EngineError {
    /// A tool's input schema is not a valid JSON Schema, or refers to a remote document.
    #[error("tool `{tool}` has an invalid input schema: {message}")]
    InvalidSchema { tool: String, message: String },
    /// Two tools, or a tool and another tool's alias, share a name.
    #[error("tool name `{name}` is used twice: by `{first}` and by `{second}`")]
    DuplicateName {
        name: String,
        first: String,
        second: String,
    },
    /// An option is out of its range.
    #[error("invalid option `{option}`: {message}")]
    InvalidOption { option: &'static str, message: String },
    /// The results handed to assembly do not answer every call exactly once.
    #[error("result assembly failed: {0}")]
    Assembly(String),
}
