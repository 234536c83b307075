//! Which of the Prometheus Operator's kinds the cluster serves: API discovery of
//! `monitoring.coreos.com/v1`, remembered between reconciles (their apply and prune:
//! `monitoring_apply`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;

use crate::build::monitoring::{API_VERSION, MonitoringKind};
use crate::error::Result;

/// How long "not served" is believed before a reconcile that wants the kind asks again (so
/// installing the Prometheus Operator after screenlimit needs no restart).
pub const ASK_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// What discovery said last, and when.
#[derive(Default)]
pub struct MonitoringApi {
    last: Mutex<Option<(Vec<MonitoringKind>, Instant)>>,
}

impl MonitoringApi {
    /// Asks the API server which of the kinds it serves, and remembers the answer.
    pub async fn discover(&self, client: &Client) -> Result<Vec<MonitoringKind>, kube::Error> {
        let served = match client.list_api_group_resources(API_VERSION).await {
            Ok(list) => MonitoringKind::ALL
                .into_iter()
                .filter(|k| list.resources.iter().any(|r| r.name == k.plural()))
                .collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(e) => return Err(e),
        };
        *self.last.lock().expect("discovery lock") = Some((served.clone(), Instant::now()));
        Ok(served)
    }

    /// The kinds last seen served; `None` before the first discovery.
    pub fn known(&self) -> Option<Vec<MonitoringKind>> {
        let last = self.last.lock().expect("discovery lock");
        last.as_ref().map(|(served, _)| served.clone())
    }

    /// Forgets the last answer (a kind answered 404: its CRD is gone).
    pub(crate) fn forget(&self) {
        *self.last.lock().expect("discovery lock") = None;
    }

    /// The served kinds for a reconcile that wants `requested`: the remembered answer, asked
    /// again when a wanted kind was missing a while ago or nothing was ever asked. With nothing
    /// wanted and nothing known (no discovery at start), nothing is served as far as it knows.
    pub(crate) async fn served_for(
        &self,
        client: &Client,
        requested: &[MonitoringKind],
    ) -> Result<Vec<MonitoringKind>> {
        let last = self.last.lock().expect("discovery lock").clone();
        match last {
            Some((served, at))
                if requested.iter().all(|k| served.contains(k))
                    || at.elapsed() < ASK_AGAIN_AFTER =>
            {
                Ok(served)
            }
            None if requested.is_empty() => Ok(Vec::new()),
            _ => Ok(self.discover(client).await?),
        }
    }
}
