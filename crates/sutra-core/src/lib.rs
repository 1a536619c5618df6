//! Sutra's pure core: the flow language, its checker, CEL expressions and the step executor.
//!
//! Architecture invariant: this crate does no I/O, has no async runtime, and never reads the clock
//! or a random source. Time and instance ids come in as arguments; effects go out as data. That is
//! what lets the executor be tested exhaustively and model-checked, and what lets every store and
//! transport be built on top of it without the core knowing.

pub mod check;
pub mod cloud_event;
pub mod codes;
pub mod diagnostic;
pub mod duration;
pub mod exec;
pub mod expr;
pub mod model;
pub mod request;
pub mod schedule;
pub mod snapshot;
pub mod step;
pub mod storable;
pub mod yaml;
