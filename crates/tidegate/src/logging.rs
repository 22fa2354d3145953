//! `tracing` set-up: human or JSON lines on stderr, level from `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::cli::LogFormat;

/// Installs the global subscriber.
pub fn init(format: LogFormat) {
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let subscriber = Registry::default().with(filter(std::env::var("RUST_LOG").ok().as_deref()));
    match format {
        LogFormat::Human => subscriber.with(fmt).init(),
        LogFormat::Json => subscriber.with(fmt.json()).init(),
    }
}

/// The filter for a `RUST_LOG` value. Directives naming only targets and
/// levels (`info`, `tidegate_s2s=debug,warn`: what operators use) become a
/// static [`Targets`] filter; only directives that filter on spans or
/// fields (`[conn{peer=…}]=debug`) need [`EnvFilter`]. The difference is
/// paid on every poll of every connection task: `EnvFilter` looks each
/// entered span up in a map behind a process-wide lock, on enter and on
/// exit, which showed in the S2S server's profile as a cost that only
/// appears with more than one worker thread.
fn filter(spec: Option<&str>) -> Box<dyn Layer<Registry> + Send + Sync> {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty());
    let Some(spec) = spec else {
        return Box::new(default_targets());
    };
    if !spec.contains(['[', '{']) {
        if let Ok(t) = spec.parse::<Targets>() {
            return Box::new(t);
        }
    }
    match EnvFilter::try_new(spec) {
        Ok(f) => Box::new(f),
        Err(_) => Box::new(default_targets()),
    }
}

/// `info` for everything: when `RUST_LOG` is unset or cannot be parsed.
fn default_targets() -> Targets {
    Targets::new().with_default(tracing::Level::INFO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    /// Runs `f` with a subscriber filtered by `spec`.
    fn with_filter<T>(spec: Option<&str>, f: impl FnOnce() -> T) -> T {
        tracing::subscriber::with_default(Registry::default().with(filter(spec)), f)
    }

    #[test]
    fn plain_directives_filter_by_target_and_level() {
        with_filter(None, || {
            assert!(tracing::enabled!(target: "tidegate_s2s", Level::INFO));
            assert!(!tracing::enabled!(target: "tidegate_s2s", Level::DEBUG));
        });
        with_filter(Some("warn,tidegate_s2s=debug"), || {
            assert!(tracing::enabled!(target: "tidegate_s2s", Level::DEBUG));
            assert!(!tracing::enabled!(target: "tidegate_s2s", Level::TRACE));
            assert!(!tracing::enabled!(target: "tidegate_hub", Level::INFO));
            assert!(tracing::enabled!(target: "tidegate_hub", Level::WARN));
        });
    }

    #[test]
    fn span_directives_still_work_and_garbage_falls_back_to_info() {
        with_filter(Some("warn,[conn]=debug"), || {
            assert!(!tracing::enabled!(target: "tidegate_s2s", Level::DEBUG));
            let span = tracing::info_span!("conn");
            let _in = span.enter();
            assert!(tracing::enabled!(target: "tidegate_s2s", Level::DEBUG));
        });
        with_filter(Some("=[="), || {
            assert!(tracing::enabled!(target: "x", Level::INFO));
            assert!(!tracing::enabled!(target: "x", Level::DEBUG));
        });
    }
}
