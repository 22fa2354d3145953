//! Engine.IO sessions: the state both transports share ([`engine`]), the
//! sid → session map ([`registry`]), the task that runs heartbeats and
//! the application protocol ([`task`]), and when a websocket session writes
//! ([`flush`]).

pub mod engine;
pub mod flush;
pub mod registry;
pub mod task;

pub use engine::{EngineSession, Outgoing};
pub use registry::SessionRegistry;
