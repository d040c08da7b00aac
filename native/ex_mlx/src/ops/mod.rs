//! NIFs for MLX operations, grouped by family. Each decodes and checks its
//! arguments on the calling scheduler (cheap), then queues the MLX work on the
//! device's worker (see `reply`).

pub mod creation;
pub mod device;
pub mod elementwise;
pub mod eval;
pub mod fft;
pub mod indexing;
pub mod linalg;
pub mod reduce;
pub mod shape;
pub mod sort;
