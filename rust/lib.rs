//! The toolsched engine: compiled argument validators, turn planning, batch
//! scheduling, ordered result assembly and result shaping.
//!
//! Pure Rust; the PyO3 binding lives in [`py`] behind the `python` feature.

pub mod assemble;
pub mod catalog;
pub mod conflicts;
pub mod direct;
pub mod error;
pub mod plan;
pub mod repair;
pub mod rules;
pub mod schedule;
pub mod shape;
pub mod validate;

#[cfg(feature = "python")]
mod py;

pub use error::EngineError;

// The extension allocates and frees many small values per call (parsed
// arguments, their keys and strings); mimalloc does that faster than the C
// library's allocator (`ToolTable.prepare` on 1,000 calls: 0.75 -> 0.63 µs per
// call, benches/README.md). Only the Python extension uses it; the engine as a
// Rust library leaves the choice to its user.
#[cfg(feature = "python")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
