//! A measured window whose start and end are known in advance (the end of
//! a warm-up, the end of a schedule), marked at those two instants by a
//! thread of its own, so that the load's own threads and tasks never stop
//! to read `/proc`.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::{CpuWindow, Mark, Marker};

/// Marks `from` and `to` on a [`Marker`]'s samplers when they come.
#[derive(Debug)]
pub struct TimedWindow {
    /// Dropped or sent to: the run is over, stop waiting.
    wake: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<Option<CpuWindow>>>,
}

/// Sleeps until `t`; false when woken before it (the run is over).
fn wait_until(wake: &mpsc::Receiver<()>, t: Instant) -> bool {
    loop {
        let now = Instant::now();
        if now >= t {
            return true;
        }
        match wake.recv_timeout(t - now) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
    }
}

impl TimedWindow {
    /// Starts waiting for `from`, then `to`. An empty window (`to` not
    /// after `from`) has no CPU of its own: it is never marked.
    pub fn spawn(marker: &Marker, from: Instant, to: Instant) -> TimedWindow {
        let (tx, rx) = mpsc::channel();
        let marker = marker.clone();
        if to <= from {
            return TimedWindow {
                wake: Some(tx),
                handle: None,
            };
        }
        let handle = std::thread::Builder::new()
            .name("bench-cpu-window".into())
            .spawn(move || {
                if !wait_until(&rx, from) {
                    return None;
                }
                let from: Mark = marker.mark();
                if !wait_until(&rx, to) {
                    return None;
                }
                Some(CpuWindow {
                    from,
                    to: marker.mark(),
                })
            })
            // No thread, no window: the CPU is then reported over the
            // whole run, and says so.
            .ok();
        TimedWindow {
            wake: Some(tx),
            handle,
        }
    }

    /// The window, once its end has come: waits for `to` if it has not
    /// yet (a run may end a moment before its window does: the CPU still
    /// covers the whole window). Blocks: from async code, call it where
    /// `to` has passed or on a blocking thread.
    pub fn finish(mut self) -> Option<CpuWindow> {
        let h = self.handle.take()?;
        // The sender stays alive while joining: it is what keeps the
        // thread waiting for `to`.
        let w = h.join().ok().flatten();
        self.wake.take();
        w
    }
}

impl Drop for TimedWindow {
    /// Abandoned (the run failed): the thread stops at once, no window.
    fn drop(&mut self) {
        if let Some(w) = self.wake.take() {
            let _ = w.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Sampler;
    use std::time::Duration;

    #[test]
    fn the_marks_are_taken_at_the_two_instants_and_finish_waits_for_the_end() {
        let s = Sampler::start_self(Duration::from_secs(1));
        let t0 = Instant::now();
        let w = TimedWindow::spawn(
            &s.marker(),
            t0 + Duration::from_millis(100),
            t0 + Duration::from_millis(400),
        );
        let window = w.finish().expect("both marks taken");
        assert!(t0.elapsed() >= Duration::from_millis(400));
        let stats = s.finish_over(Some(window));
        assert_eq!(stats.cpu_over, Some(super::super::CpuOver::MeasuredWindow));
        assert!((stats.cpu_span_s - 0.3).abs() < 0.05, "{stats:?}");
    }

    #[test]
    fn an_abandoned_window_stops_at_once_without_marks() {
        let t0 = Instant::now();
        let w = TimedWindow::spawn(
            &Marker::default(),
            t0 + Duration::from_secs(30),
            t0 + Duration::from_secs(60),
        );
        let h = {
            let mut w = w;
            let h = w.handle.take().unwrap();
            drop(w);
            h
        };
        assert_eq!(h.join().unwrap(), None);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}
