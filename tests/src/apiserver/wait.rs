//! Bounded waiting: poll until a check gives a value, or fail saying what never happened, with
//! whatever context (logs, the object as last seen) explains it.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long one look may take before it counts as "not yet".
const ONE_LOOK: Duration = Duration::from_secs(15);

/// Polls `check` every 250 ms for at most `limit`; panics with `what` and `context()` when it
/// never gives a value.
pub async fn until<T, F, Fut>(
    what: &str,
    limit: Duration,
    mut check: F,
    context: impl Fn() -> String,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Ok(Some(value)) = tokio::time::timeout(ONE_LOOK, check()).await {
            return value;
        }
        assert!(
            started.elapsed() < limit,
            "never within {limit:?}: {what}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_value_ends_the_wait_and_none_fails_with_the_context() {
        let mut n = 0;
        let got = until(
            "n reaches 3",
            Duration::from_secs(5),
            || {
                n += 1;
                let n = n;
                async move { (n >= 3).then_some(n) }
            },
            String::new,
        )
        .await;
        assert_eq!(got, 3);
        let failed = tokio::spawn(until(
            "never",
            Duration::from_millis(300),
            || async { None::<()> },
            || "the context".to_owned(),
        ))
        .await
        .expect_err("a check that never passes fails");
        let message = failed.into_panic();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("never within") && message.contains("the context"),
            "{message}"
        );
    }
}
