//! A small client of Prometheus's HTTP API, for the fleet charts' longer ranges (one
//! `query_range` per chart) and the fleet page's figures (instant `query`s): each with a
//! deadline, a bounded answer, the URL built from its parts (path segments and query pairs
//! encoded by `Url`, never spliced), and errors in words.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;

/// The largest answer read: a chart's few series of at most a few hundred points are far less.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Why Prometheus gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum PrometheusError {
    #[error("Prometheus at {url} did not answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("Prometheus at {url} cannot be reached: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("Prometheus at {url} refused the query (HTTP {status}, {kind}): {message}")]
    Refused {
        url: String,
        status: u16,
        kind: String,
        message: String,
    },
    #[error("Prometheus at {url} sent an answer that cannot be read: {detail}")]
    BadBody { url: String, detail: String },
    #[error("the Prometheus URL {url} is not usable: {detail}; check --prometheus-url")]
    BadUrl { url: String, detail: String },
}

/// One series of a range query: its labels and its values at `start + k × step`, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    /// (unix seconds, value); NaN and infinities are left out.
    pub points: Vec<(f64, f64)>,
}

/// One series of an instant query: its labels and its value at the time asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: String,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<RawSeries>,
}

#[derive(Deserialize)]
struct RawSeries {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    /// A matrix's points.
    #[serde(default)]
    values: Vec<(f64, String)>,
    /// A vector's one value.
    #[serde(default)]
    value: Option<(f64, String)>,
}

/// A value as Prometheus sends it (a string), when it is a finite number.
fn finite(value: &str) -> Option<f64> {
    value.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[derive(Clone)]
pub struct PrometheusClient {
    http: reqwest::Client,
    base: Url,
    /// The base as shown in messages: without any user name or password it carries.
    shown: String,
    timeout: Duration,
}

impl PrometheusClient {
    /// A client of the Prometheus at `base` (`http(s)://host:port`, optionally with a path
    /// prefix such as `/prometheus`), every call bounded by `timeout`.
    pub fn new(base: &str, timeout: Duration) -> Result<Self, PrometheusError> {
        let bad = |detail: &str| PrometheusError::BadUrl {
            url: base.to_owned(),
            detail: detail.to_owned(),
        };
        let url = Url::parse(base).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") || url.query().is_some() {
            return Err(bad("it must be an http(s) URL without a query"));
        }
        if url.cannot_be_a_base() {
            return Err(bad("it cannot take a path"));
        }
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| bad(&e.to_string()))?;
        Ok(PrometheusClient {
            http,
            shown: shown.as_str().trim_end_matches('/').to_owned(),
            base: url,
            timeout,
        })
    }

    pub fn shown_url(&self) -> &str {
        &self.shown
    }

    /// `GET /api/v1/query_range?query=…&start=…&end=…&step=…` (times in unix seconds).
    pub fn query_range_url(&self, query: &str, start: u64, end: u64, step: u64) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new")
            .pop_if_empty()
            .extend(["api", "v1", "query_range"]);
        url.query_pairs_mut()
            .append_pair("query", query)
            .append_pair("start", &start.to_string())
            .append_pair("end", &end.to_string())
            .append_pair("step", &step.to_string());
        url
    }

    /// `GET /api/v1/query?query=…&time=…` (unix seconds).
    pub fn query_url(&self, query: &str, time: u64) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new")
            .pop_if_empty()
            .extend(["api", "v1", "query"]);
        url.query_pairs_mut()
            .append_pair("query", query)
            .append_pair("time", &time.to_string());
        url
    }

    /// The matrix `query` gives from `start` to `end` every `step` seconds.
    pub async fn query_range(
        &self,
        query: &str,
        start: u64,
        end: u64,
        step: u64,
    ) -> Result<Vec<Series>, PrometheusError> {
        let data = self
            .fetch(self.query_range_url(query, start, end, step))
            .await?;
        if data.result_type != "matrix" {
            return Err(self.bad_body(format!("a {} instead of a matrix", data.result_type)));
        }
        Ok(data
            .result
            .into_iter()
            .map(|raw| Series {
                labels: raw.metric,
                points: raw
                    .values
                    .into_iter()
                    .filter_map(|(at, value)| finite(&value).map(|v| (at, v)))
                    .collect(),
            })
            .collect())
    }

    /// The vector `query` gives at `time` (unix seconds); series whose value is NaN or infinite
    /// are left out.
    pub async fn query(&self, query: &str, time: u64) -> Result<Vec<Sample>, PrometheusError> {
        let data = self.fetch(self.query_url(query, time)).await?;
        if data.result_type != "vector" {
            return Err(self.bad_body(format!("a {} instead of a vector", data.result_type)));
        }
        Ok(data
            .result
            .into_iter()
            .filter_map(|raw| {
                let value = finite(&raw.value?.1)?;
                Some(Sample {
                    labels: raw.metric,
                    value,
                })
            })
            .collect())
    }

    /// The `data` of Prometheus's answer at `url`, read up to `MAX_BODY` within the deadline.
    async fn fetch(&self, url: Url) -> Result<Data, PrometheusError> {
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(e))? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(self.bad_body(format!("more than {MAX_BODY} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let answer: Answer = match serde_json::from_slice(&body) {
            Ok(answer) => answer,
            Err(_) if !status.is_success() => {
                return Err(PrometheusError::Refused {
                    url: self.shown.clone(),
                    status: status.as_u16(),
                    kind: "no Prometheus error body".into(),
                    message: String::from_utf8_lossy(&body).chars().take(200).collect(),
                });
            }
            Err(e) => return Err(self.bad_body(e.to_string())),
        };
        if answer.status != "success" {
            return Err(PrometheusError::Refused {
                url: self.shown.clone(),
                status: status.as_u16(),
                kind: answer.error_type,
                message: answer.error.chars().take(300).collect(),
            });
        }
        answer.data.ok_or_else(|| self.bad_body("no data".into()))
    }

    fn bad_body(&self, detail: String) -> PrometheusError {
        PrometheusError::BadBody {
            url: self.shown.clone(),
            detail,
        }
    }

    fn transport(&self, error: reqwest::Error) -> PrometheusError {
        // The query is in the URL: long, and said by the chart already.
        let error = error.without_url();
        if error.is_timeout() {
            return PrometheusError::Timeout {
                url: self.shown.clone(),
                timeout: self.timeout,
            };
        }
        let mut detail = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            detail = format!("{detail}: {cause}");
            source = cause.source();
        }
        PrometheusError::Unreachable {
            url: self.shown.clone(),
            detail,
        }
    }
}

/// Whether Prometheus answered the last query, so that an outage is logged as it starts and as
/// it ends, not at every page refresh.
#[derive(Default)]
pub struct Health {
    failing: std::sync::Mutex<bool>,
}

impl Health {
    /// Records the outcome of a query (`None`: it answered); logs a change.
    pub fn report(&self, error: Option<&PrometheusError>) {
        let mut failing = self.failing.lock().expect("prometheus health lock");
        match (error, *failing) {
            (Some(error), false) => {
                tracing::warn!(%error, "the fleet page cannot read Prometheus; it says so, draws the dashboard's own samples and shows no shadow-refusal shares");
            }
            (None, true) => tracing::info!("the fleet page reads Prometheus again"),
            _ => {}
        }
        *failing = error.is_some();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_url_is_built_from_encoded_parts() {
        let client =
            PrometheusClient::new("http://prom.example:9090/prefix/", Duration::from_secs(1))
                .unwrap();
        let url = client.query_range_url(
            "sum by (decision) (rate(x{a=~\"b|c\"}[2m])) & 1 # ?",
            100,
            200,
            60,
        );
        assert_eq!(url.path(), "/prefix/api/v1/query_range");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                (
                    "query".into(),
                    "sum by (decision) (rate(x{a=~\"b|c\"}[2m])) & 1 # ?".into()
                ),
                ("start".into(), "100".into()),
                ("end".into(), "200".into()),
                ("step".into(), "60".into()),
            ]
        );
        assert!(!url.as_str().contains(' ') && !url.as_str().contains('#'));
    }

    #[test]
    fn the_instant_query_url_is_built_from_encoded_parts() {
        let client =
            PrometheusClient::new("http://prom.example:9090/prefix", Duration::from_secs(1))
                .unwrap();
        let query = "sum by (plan) (increase(x{decision=\"shadow_refused\"}[1h])) & 1 # ?";
        let url = client.query_url(query, 1_700_000_000);
        assert_eq!(url.path(), "/prefix/api/v1/query");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("query".into(), query.into()),
                ("time".into(), "1700000000".into())
            ]
        );
        assert!(!url.as_str().contains(' ') && !url.as_str().contains('#'));
    }

    #[test]
    fn a_url_with_a_query_or_another_scheme_is_refused_and_credentials_are_not_shown() {
        for bad in ["ftp://prom:9090", "http://prom:9090/?x=1", "not a url"] {
            assert!(
                matches!(
                    PrometheusClient::new(bad, Duration::from_secs(1)),
                    Err(PrometheusError::BadUrl { .. })
                ),
                "{bad}"
            );
        }
        let client =
            PrometheusClient::new("https://u:secret@prom:9090", Duration::from_secs(1)).unwrap();
        assert_eq!(client.shown_url(), "https://prom:9090");
    }
}
