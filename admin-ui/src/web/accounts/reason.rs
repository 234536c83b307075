//! The reason support types for a force-stop or a limit change, for the audit log.

/// Longest force-stop reason the limiter keeps, in bytes.
pub const MAX_REASON_BYTES: usize = 200;

/// Normalizes a reason typed in a text area; says what is wrong with it, if anything.
pub fn clean_reason(raw: &str) -> Result<String, String> {
    let reason = raw.replace("\r\n", "\n").trim().to_owned();
    if reason.len() > MAX_REASON_BYTES {
        return Err(format!(
            "The reason is {} bytes long; the audit log keeps at most {MAX_REASON_BYTES}. \
             Shorten it and confirm again.",
            reason.len()
        ));
    }
    if reason.chars().any(|c| c.is_control() && c != '\n') {
        return Err("The reason holds control characters; type it as plain text.".into());
    }
    Ok(reason)
}
