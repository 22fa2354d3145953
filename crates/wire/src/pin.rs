//! Pinning a thread to one CPU, for the low-latency poller (`[wire] cpu`)
//! and for load generators that want the same (`tidegate bench echo
//! --cpu`). Uses the `core_affinity` crate, so no `unsafe` here.

/// Pins the calling thread to CPU `cpu`. Returns false (and leaves the
/// thread unpinned) when that CPU does not exist or the kernel refuses.
pub fn pin_current_thread(cpu: usize) -> bool {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    match ids.into_iter().find(|c| c.id == cpu) {
        Some(id) => core_affinity::set_for_current(id),
        None => false,
    }
}
