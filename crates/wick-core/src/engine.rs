//! The engine's public API.
pub struct Engine;
pub struct EngineOptions;
