//! A progress line once a second on stderr, only when stderr is a terminal
//! (so `--json` runs and CI logs stay clean).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters a scenario bumps and the progress line reads.
#[derive(Debug, Default)]
pub struct Progress {
    /// Sent so far.
    pub sent: AtomicU64,
    /// Received so far.
    pub received: AtomicU64,
    /// Errors so far.
    pub errors: AtomicU64,
    done: AtomicBool,
}

impl Progress {
    /// Starts printing once a second (if stderr is a terminal) until `finish`.
    pub fn start(label: &str) -> Arc<Progress> {
        let p = Arc::new(Progress::default());
        if std::io::stderr().is_terminal() {
            let q = p.clone();
            let label = label.to_owned();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let mut last = (0u64, t0);
                while !q.done.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_secs(1));
                    let sent = q.sent.load(Ordering::Relaxed);
                    let now = Instant::now();
                    let rate = (sent - last.0) as f64 / now.duration_since(last.1).as_secs_f64();
                    last = (sent, now);
                    eprint!(
                        "\r[{label}] {:>5.0}s  sent {sent}  received {}  errors {}  {rate:.0}/s   ",
                        t0.elapsed().as_secs_f64(),
                        q.received.load(Ordering::Relaxed),
                        q.errors.load(Ordering::Relaxed),
                    );
                }
                eprintln!();
            });
        }
        p
    }

    /// Stops the progress line.
    pub fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }
}
