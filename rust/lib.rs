//! The toolsched engine: compiled argument validators, turn planning, batch
//! scheduling, ordered result assembly and result shaping.
//!
//! Pure Rust; the PyO3 binding lives in [`py`] behind the `python` feature.

pub mod assemble;
pub mod catalog;
pub mod conflicts;
pub mod error;
pub mod plan;
pub mod schedule;
pub mod shape;
pub mod validate;

#[cfg(feature = "python")]
mod py;

pub use error::EngineError;
