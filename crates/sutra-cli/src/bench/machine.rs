//! How busy the machine was while the workload ran, from Linux's `/proc/stat`: the CPU time every
//! process spent (the engine, PostgreSQL, the bench's own clients and worker, anything else on
//! the machine), over the driving time, and per completed instance. A change that saves work
//! shows here even where throughput is bound by latency and does not move; both figures count
//! the whole machine, so read them on a quiet one.

use std::time::Duration;

use serde::Serialize;

/// The machine's CPU counters at one moment: jiffies busy and in all, summed over its cores.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    busy: u64,
    total: u64,
    cores: usize,
}

/// What the machine spent between two samples.
#[derive(Debug, Serialize)]
pub struct Load {
    pub measured: &'static str,
    pub cores: usize,
    /// Cores' worth of CPU kept busy, on average.
    pub busy_cores: f64,
    pub cpu_ms_per_instance: Option<f64>,
}

const MEASURED: &str = "/proc/stat over the driving time: user, nice, system, irq and softirq \
     time of every process on the machine (the engine, PostgreSQL, the bench's clients and worker)";

impl Sample {
    /// `None` where `/proc/stat` cannot be read or parsed (not Linux).
    pub fn now() -> Option<Sample> {
        parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The load from `self` to `later`, `completed` instances having ended over `elapsed`.
    pub fn load_until(self, later: Sample, elapsed: Duration, completed: u64) -> Option<Load> {
        let total = later.total.checked_sub(self.total).filter(|t| *t > 0)?;
        let busy = later.busy.checked_sub(self.busy)?;
        // Jiffy counts over a run are far below 2^52: exact as floats.
        let busy_cores = busy as f64 / total as f64 * self.cores as f64;
        let cpu_ms = busy_cores * elapsed.as_secs_f64() * 1000.0;
        Some(Load {
            measured: MEASURED,
            cores: self.cores,
            busy_cores,
            cpu_ms_per_instance: (completed > 0).then(|| cpu_ms / completed as f64),
        })
    }
}

/// The `cpu` line (the sum over cores) and the count of `cpuN` lines.
fn parse(stat: &str) -> Option<Sample> {
    let mut lines = stat.lines();
    let fields: Vec<u64> = lines
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal …
    let [user, nice, system, idle, iowait, irq, softirq, ..] = fields[..] else {
        return None;
    };
    let steal = fields.get(7).copied().unwrap_or(0);
    let cores = lines
        .filter(|line| line.starts_with("cpu") && !line.starts_with("cpu "))
        .count();
    let busy = user + nice + system + irq + softirq;
    Some(Sample {
        busy,
        total: busy + idle + iowait + steal,
        cores: cores.max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 0 50 800 10 5 5 30 0 0\ncpu0 50 0 25 400 5 2 3 15 0 0\n\
                        cpu1 50 0 25 400 5 3 2 15 0 0\nintr 1 2 3\n";

    #[test]
    fn busy_cores_are_the_busy_share_of_every_core() {
        let before = parse(STAT).unwrap();
        assert_eq!((before.busy, before.total, before.cores), (160, 1000, 2));
        let after = Sample {
            busy: before.busy + 150,
            total: before.total + 200,
            cores: 2,
        };
        let load = before
            .load_until(after, Duration::from_secs(2), 100)
            .unwrap();
        assert_eq!(load.busy_cores, 1.5);
        assert_eq!(load.cpu_ms_per_instance, Some(30.0));
    }

    #[test]
    fn an_unreadable_stat_is_no_sample() {
        assert!(parse("").is_none());
        assert!(parse("cpu  1 2 3\n").is_none());
        assert!(parse("intr 1\n").is_none());
    }
}
