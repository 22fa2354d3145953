//! The arithmetic of a span of readings: the average CPU between its first
//! and last reading, and the highest CPU over any stretch of at least the
//! sampling period inside it. Pure: readings in, figures out.

use std::time::{Duration, Instant};

/// Shortest span, in clock ticks, whose CPU is a figure: CPU time moves in
/// whole ticks (10 ms), so over a span of a few ticks one tick more or less
/// is tens of per cent.
const MIN_SPAN_TICKS: f64 = 10.0;

/// One reading of the sampled processes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sample {
    /// When it was taken.
    pub at: Instant,
    /// user + system CPU time used so far, clock ticks (summed over the
    /// processes).
    pub ticks: u64,
    /// Resident set, KiB (summed).
    pub rss_kb: u64,
    /// The mark it was taken for; `None` for a periodic reading.
    pub mark: Option<u64>,
}

/// CPU figures over a span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CpuFigures {
    /// CPU time over the span's length, % of one core.
    pub avg_pct: f64,
    /// The highest % over a stretch of at least the period.
    pub max_pct: f64,
    /// The span's length, seconds.
    pub seconds: f64,
}

/// The CPU over `samples` (in time order; the first and the last bound the
/// span), `hz` clock ticks a second. The maximum is taken over, from each
/// reading, the shortest stretch to a later one that lasts at least
/// `every` (one-second figures, as the periodic readings give, whatever
/// marks lie between them), and the whole span, itself such a stretch (so
/// it is never below the average); a span shorter than `every` has only
/// its average (clock ticks are 10 ms: a shorter stretch is noise). `None`
/// for a span shorter than [`MIN_SPAN_TICKS`] (or of fewer than two
/// readings): no figure rather than noise.
pub(super) fn cpu_over(samples: &[Sample], every: Duration, hz: f64) -> Option<CpuFigures> {
    let (first, last) = (samples.first()?, samples.last()?);
    let seconds = last.at.saturating_duration_since(first.at).as_secs_f64();
    if seconds * hz < MIN_SPAN_TICKS {
        return None;
    }
    let pct = |a: &Sample, b: &Sample| {
        let dt = b.at.saturating_duration_since(a.at).as_secs_f64();
        b.ticks.saturating_sub(a.ticks) as f64 / hz / dt * 100.0
    };
    let avg_pct = pct(first, last);
    let mut max_pct = avg_pct;
    let mut j = 0;
    for (i, a) in samples.iter().enumerate() {
        j = j.max(i + 1);
        while j < samples.len() && samples[j].at.saturating_duration_since(a.at) < every {
            j += 1;
        }
        let Some(b) = samples.get(j) else { break };
        max_pct = max_pct.max(pct(a, b));
    }
    Some(CpuFigures {
        avg_pct,
        max_pct,
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: f64 = 100.0;
    const SECOND: Duration = Duration::from_secs(1);

    /// Readings at these (ms, ticks) after `t0`.
    fn series(t0: Instant, points: &[(u64, u64)]) -> Vec<Sample> {
        points
            .iter()
            .map(|&(ms, ticks)| Sample {
                at: t0 + Duration::from_millis(ms),
                ticks,
                rss_kb: 1,
                mark: None,
            })
            .collect()
    }

    #[test]
    fn the_average_is_the_ticks_between_the_ends_over_their_distance() {
        let t0 = Instant::now();
        // 150 ticks (1.5 s of CPU at 100 Hz) over 3 s: half a core.
        let s = series(t0, &[(0, 1000), (1000, 1100), (2000, 1100), (3000, 1150)]);
        let c = cpu_over(&s, SECOND, HZ).unwrap();
        assert!((c.avg_pct - 50.0).abs() < 1e-9, "{c:?}");
        assert!((c.seconds - 3.0).abs() < 1e-9, "{c:?}");
        // The busiest second: 100 ticks in the first.
        assert!((c.max_pct - 100.0).abs() < 1e-9, "{c:?}");
        // A sub-span (a window's marks) counts only its own ticks.
        let c = cpu_over(&s[1..=2], SECOND, HZ).unwrap();
        assert_eq!((c.avg_pct, c.max_pct), (0.0, 0.0), "{c:?}");
    }

    #[test]
    fn the_maximum_takes_stretches_of_at_least_the_period_whatever_lies_between() {
        let t0 = Instant::now();
        // Marks every 250 ms; 40 ticks between 1.0 and 1.25 s, none else.
        let s = series(
            t0,
            &[
                (0, 0),
                (250, 0),
                (500, 0),
                (750, 0),
                (1000, 0),
                (1250, 40),
                (1500, 40),
                (1750, 40),
                (2000, 40),
            ],
        );
        let c = cpu_over(&s, SECOND, HZ).unwrap();
        // Every one-second stretch holding the burst shows it as 40 %, not
        // the 160 % of the 250 ms it took.
        assert!((c.max_pct - 40.0).abs() < 1e-9, "{c:?}");
        assert!((c.avg_pct - 20.0).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn the_maximum_is_never_below_the_average() {
        let t0 = Instant::now();
        // The busy part falls after the last one-second stretch's start.
        let s = series(t0, &[(0, 0), (300, 0), (1300, 0), (2000, 70)]);
        let c = cpu_over(&s, SECOND, HZ).unwrap();
        assert!((c.avg_pct - 35.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.max_pct, c.avg_pct, "{c:?}");
    }

    #[test]
    fn a_span_shorter_than_the_period_has_its_average_as_maximum() {
        let t0 = Instant::now();
        let s = series(t0, &[(0, 0), (300, 15), (500, 15)]);
        let c = cpu_over(&s, SECOND, HZ).unwrap();
        assert!((c.avg_pct - 30.0).abs() < 1e-9, "{c:?}");
        assert_eq!(c.max_pct, c.avg_pct);
    }

    #[test]
    fn a_span_of_a_few_clock_ticks_has_no_figures_rather_than_noise() {
        let t0 = Instant::now();
        // One tick in 3 ms would read as 333 %.
        assert_eq!(cpu_over(&series(t0, &[(0, 0), (3, 1)]), SECOND, HZ), None);
        assert!(cpu_over(&series(t0, &[(0, 0), (100, 1)]), SECOND, HZ).is_some());
    }

    #[test]
    fn a_span_of_no_length_has_no_figures_rather_than_zeros() {
        let t0 = Instant::now();
        assert_eq!(cpu_over(&[], SECOND, HZ), None);
        assert_eq!(cpu_over(&series(t0, &[(0, 5)]), SECOND, HZ), None);
        assert_eq!(cpu_over(&series(t0, &[(0, 5), (0, 9)]), SECOND, HZ), None);
    }
}
