//! Shared by the integration tests (`mod common;` in each test file that needs it).

// Each test file is its own crate and uses only some of these helpers.
#![allow(dead_code)]

pub mod device;
pub mod engine;

#[allow(unused_imports)] // each test file uses some
pub use wick_fixtures::assets::{in_ci, llama_src, skip};
