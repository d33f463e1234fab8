//! Logging: `tracing`, with NCCL's `NCCL_DEBUG` / `NCCL_DEBUG_SUBSYS` mapped onto the filter.

use tracing_subscriber::EnvFilter;

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

/// Install the global subscriber once (stderr). `RUST_LOG` wins over `NCCL_DEBUG`.
pub fn init() {
    let directive = std::env::var("RUST_LOG").unwrap_or_else(|_| {
        filter_from_nccl(
            &crate::settings::get("NCCL_DEBUG"),
            &crate::settings::get("NCCL_DEBUG_SUBSYS"),
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(directive))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
