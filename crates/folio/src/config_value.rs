//! Values of TOML config keys (`folio bookie --config`, `--override`), each with the error
//! that names its key.

/// A config value that must be a non-negative integer.
pub(crate) fn non_negative(key: &str, v: &toml::Value) -> Result<u64, String> {
    v.as_integer()
        .filter(|i| *i >= 0)
        .map(|i| i as u64)
        .ok_or(format!("{key} must be a non-negative integer"))
}

/// A config value that must be true or false.
pub(crate) fn true_or_false(key: &str, v: &toml::Value) -> Result<bool, String> {
    v.as_bool().ok_or(format!("{key} must be true or false"))
}
