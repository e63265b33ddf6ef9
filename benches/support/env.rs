//! What the benches read from the environment.

/// The number in environment variable `name`, or `default` when it is unset or not one.
pub fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
