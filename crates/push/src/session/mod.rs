//! Engine.IO sessions: the state both transports share ([`engine`]), the
//! sid → session map ([`registry`]), the task that runs heartbeats and
//! the application protocol ([`task`]), when a session writes ([`flush`])
//! and whether the server is loaded ([`load`]).

pub mod engine;
pub mod flush;
pub mod load;
pub mod registry;
pub mod task;

pub use engine::{EngineSession, Outgoing};
pub use registry::SessionRegistry;
