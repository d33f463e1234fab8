//! Logging: `tracing`, with NCCL's `NCCL_DEBUG` / `NCCL_DEBUG_SUBSYS` mapped onto the filter.
//! The filter sits behind a reload handle, so [`reload`] (the C ABI's `ncclResetDebugInit`)
//! re-reads the settings and applies them to later log lines.

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// The filter directive for an `NCCL_DEBUG` level and `NCCL_DEBUG_SUBSYS` list.
pub fn filter_from_nccl(level: &str, subsys: &str) -> String {
    let lvl = match level.to_ascii_uppercase().as_str() {
        "VERSION" | "WARN" => "warn",
        "INFO" => "info",
        "ABORT" => "error",
        "TRACE" => "trace",
        _ => "warn",
    };
    let subs: Vec<String> = subsys
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty() && s != "all")
        .collect();
    if subs.is_empty() {
        format!("oxccl={lvl}")
    } else {
        let mut d = vec!["oxccl=warn".to_string()];
        d.extend(subs.iter().map(|s| format!("oxccl::{s}={lvl}")));
        d.join(",")
    }
}

/// The directive the environment asks for now: `RUST_LOG` if set, else `NCCL_DEBUG` and
/// `NCCL_DEBUG_SUBSYS`.
fn directive() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| {
        filter_from_nccl(
            &crate::settings::get("NCCL_DEBUG"),
            &crate::settings::get("NCCL_DEBUG_SUBSYS"),
        )
    })
}

/// The reload handle of the filter of the subscriber [`init`] installed.
static HANDLE: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Install the global subscriber once (stderr). `RUST_LOG` wins over `NCCL_DEBUG`. Does
/// nothing when a global subscriber exists already.
pub fn init() {
    let (filter, handle) = reload::Layer::new(EnvFilter::new(directive()));
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .try_init();
    if installed.is_ok() {
        let _ = HANDLE.set(handle);
    }
}

/// Re-read `RUST_LOG` / `NCCL_DEBUG` / `NCCL_DEBUG_SUBSYS` and apply them to the subscriber
/// [`init`] installed (installing it first if nothing is installed yet). False when the
/// process's subscriber is not oxccl's (its filter is not ours to change).
pub fn reload() -> bool {
    if HANDLE.get().is_none() {
        init();
    }
    match HANDLE.get() {
        Some(h) => h.reload(EnvFilter::new(directive())).is_ok(),
        None => false,
    }
}
