//! Engine.IO sessions: the state both transports share ([`engine`]), the
//! sid → session map ([`registry`]), and the task that runs heartbeats and
//! the application protocol ([`task`]).

pub mod engine;
pub mod registry;
pub mod task;

pub use engine::{EngineSession, Outgoing};
pub use registry::SessionRegistry;
