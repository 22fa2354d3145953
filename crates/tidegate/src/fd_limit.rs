//! The open-files limit. Every connection is a descriptor, and the default
//! soft limit (often 1,024) is far below what the listeners are configured
//! to hold; the hard limit is what an unprivileged process may raise it to.

use crate::config::Config;

/// Descriptors kept free of connections: listeners, the store, Kafka's
/// sockets, log files.
const RESERVED_DESCRIPTORS: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and warns when the
/// listeners' connection limits together exceed it. Returns the limit now
/// in force.
pub fn raise(config: &Config) -> Option<u64> {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit (RLIMIT_NOFILE)");
            rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?.0
        }
    };
    let wanted: u64 = config
        .listeners()
        .iter()
        .map(|(_, s)| s.max_connections as u64)
        .sum::<u64>()
        + RESERVED_DESCRIPTORS;
    if wanted > limit {
        tracing::warn!(
            limit,
            wanted,
            "the listeners' max_connections add up to more than the open-files limit \
             (RLIMIT_NOFILE); connections beyond it will fail at accept. Raise the hard \
             limit (ulimit -Hn, LimitNOFILE= in systemd) or lower max_connections"
        );
    } else {
        tracing::debug!(limit, wanted, "open-files limit");
    }
    Some(limit)
}
