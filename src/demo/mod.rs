//! The sample application of DESIGN §8 and a workload that exercises it.

pub mod orders;
pub mod pets;
pub mod rebuild;
pub mod runtime;
pub mod workload;
