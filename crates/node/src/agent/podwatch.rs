//! The watch of the node's pods, with the list read as it arrives.
//!
//! kube-runtime's `watcher` lists through `Client::request`, which holds the
//! whole answer as text before it decodes a pod: the answer in hyper's
//! chunks, then in one buffer (`to_bytes`), then copied into a `String`
//! (`request_text`). A node of 250 meshed pods answers about 4 MB, so a
//! list took three such buffers beside the store it fills, and the agent's
//! RSS sampled after an agent or API server restart held their remains
//! (24–29 MiB beside 499 other agents; issue 38's target is 24 MiB;
//! docs/benchmarks.md#the-agents-memory). Here the list's body is decoded
//! while it is read (`serde_json::from_reader` on a blocking thread over the
//! body's stream), so the list costs the pods it holds and one pod's JSON.
//!
//! Everything else is kube-runtime's `watcher` (kube-runtime 5,
//! `watcher.rs`'s `step_trampolined`), event for event, for the list-then-
//! watch strategy: `Init` before the list, `InitApply` for each listed pod,
//! `InitDone`, then a watch from the list's resourceVersion (bookmarks on,
//! the config's timeout and selectors) whose `Apply`/`Delete` follow it; a
//! failed list starts over at `Init`; a failed watch start is retried from
//! the same resourceVersion; a watch that ends, or is idle for its timeout
//! and 5 s, is started again from the last resourceVersion seen; a `410
//! Gone` relists. Each error is given to the stream's reader (the agent's
//! `default_backoff` spaces the retries). `--watch-list streaming` (a watch
//! that sends the pods, no list) is kube's `watcher` as it is.

use super::WatchList;
use super::stored::StoredPod;
use futures_util::stream::{BoxStream, StreamExt};
use kube::api::{ListParams, ObjectList, VersionMatch, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use std::time::Duration;
use tokio_util::compat::FuturesAsyncReadCompatExt;

/// What a watch start or an idle watch waits beyond the config's timeout
/// (kube-runtime's `WATCH_IDLE_TIMEOUT_MARGIN`).
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// The read buffer of the list's decoding: bytes asked of the body at once.
const READ_BUFFER: usize = 64 * 1024;

/// The pod watch of `wc` (its field selector: the node's pods) by `list`'s
/// way of listing: `Any` and `MostRecent` list, the list decoded as it is
/// read; `Streaming` is kube-runtime's `watcher`. The stream never ends;
/// its errors are kube's (`watcher::Error`).
pub fn pod_watcher(
    client: Client,
    wc: watcher::Config,
    list: WatchList,
) -> BoxStream<'static, Result<Event<StoredPod>, watcher::Error>> {
    let wc = list.config(wc);
    if list == WatchList::Streaming {
        return watcher::watcher(Api::<StoredPod>::all(client), wc).boxed();
    }
    futures_util::stream::unfold((client, wc, State::Empty), |(client, wc, state)| async {
        let (event, state) = step(&client, &wc, state).await;
        Some((event, (client, wc, state)))
    })
    .boxed()
}

/// Where the watch is (kube-runtime's `State`, without its pages and its
/// streaming list).
enum State {
    /// `Init` next, then the list.
    Empty,
    /// The list (its next page: `continue_token`) next.
    Listing { continue_token: Option<String> },
    /// A page's pods being handed out (`InitApply`); then the next page,
    /// or `InitDone` after the last (no `continue_token`).
    Listed {
        resource_version: String,
        continue_token: Option<String>,
        pods: std::vec::IntoIter<StoredPod>,
    },
    /// A watch to start from `resource_version`.
    InitListed { resource_version: String },
    /// A watch running.
    Watching {
        resource_version: String,
        stream: BoxStream<'static, kube::Result<WatchEvent<StoredPod>>>,
    },
}

/// The list's parameters (kube-runtime's `Config::to_list_params`:
/// `resourceVersion=0` for `Any`, pages of `page_size`), from the page of
/// `continue_token`.
fn list_params(wc: &watcher::Config, continue_token: Option<String>) -> ListParams {
    let any = wc.list_semantic == watcher::ListSemantic::Any;
    ListParams {
        label_selector: wc.label_selector.clone(),
        field_selector: wc.field_selector.clone(),
        resource_version: any.then(|| "0".to_string()),
        version_match: any.then_some(VersionMatch::NotOlderThan),
        limit: wc.page_size,
        continue_token,
        ..ListParams::default()
    }
}

/// The watch's parameters (kube-runtime's `Config::to_watch_params` of a
/// resumed watch).
fn watch_params(wc: &watcher::Config) -> WatchParams {
    WatchParams {
        label_selector: wc.label_selector.clone(),
        field_selector: wc.field_selector.clone(),
        timeout: wc.timeout,
        bookmarks: wc.bookmarks,
        send_initial_events: false,
    }
}

/// Lists the pods of `lp`, decoding the answer as it is read: the request
/// and the API's error answers as `Client::request`'s, the body read by
/// `serde_json::from_reader` on tokio's blocking pool.
///
/// # Errors
///
/// kube's: the request could not be built (`BuildRequest`), sent or was
/// answered with an error status (`Api`, ...), or its body is no pod list
/// (`SerdeError`, which also carries a body that broke off).
pub async fn list_pods(client: &Client, lp: &ListParams) -> kube::Result<ObjectList<StoredPod>> {
    let url = StoredPod::url_path(&(), None);
    let req = kube::core::Request::new(url)
        .list(lp)
        .map_err(kube::Error::BuildRequest)?;
    let body = client.request_stream(req).await?.compat();
    let reader = tokio_util::io::SyncIoBridge::new(body);
    tokio::task::spawn_blocking(move || {
        serde_json::from_reader(std::io::BufReader::with_capacity(READ_BUFFER, reader))
    })
    .await
    .map_err(|e| kube::Error::Service(Box::new(e)))?
    .map_err(kube::Error::SerdeError)
}

/// The next item of `stream`, or `None` when it ends or gives nothing for
/// the config's timeout (290 s unset; 0: no limit) and [`IDLE_MARGIN`].
async fn next_or_idle<S: futures_util::Stream + Unpin>(
    stream: &mut S,
    timeout: Option<u32>,
) -> Option<S::Item> {
    if timeout == Some(0) {
        return stream.next().await;
    }
    let idle = Duration::from_secs(u64::from(timeout.unwrap_or(290))) + IDLE_MARGIN;
    tokio::time::timeout(idle, stream.next())
        .await
        .ok()
        .flatten()
}

/// Steps until there is an event to give (kube-runtime's `step`).
async fn step(
    client: &Client,
    wc: &watcher::Config,
    mut state: State,
) -> (Result<Event<StoredPod>, watcher::Error>, State) {
    loop {
        match step_once(client, wc, state).await {
            (Some(event), next) => return (event, next),
            (None, next) => state = next,
        }
    }
}

/// One step: the event it gives, if any, and the next state.
async fn step_once(
    client: &Client,
    wc: &watcher::Config,
    state: State,
) -> (Option<Result<Event<StoredPod>, watcher::Error>>, State) {
    match state {
        State::Empty => (
            Some(Ok(Event::Init)),
            State::Listing {
                continue_token: None,
            },
        ),
        State::Listing { continue_token } => {
            match list_pods(client, &list_params(wc, continue_token)).await {
                Ok(list) => {
                    let (rv, next) = (list.metadata.resource_version, list.metadata.continue_);
                    match (rv.filter(|v| !v.is_empty()), next.filter(|c| !c.is_empty())) {
                        (None, None) => {
                            (Some(Err(watcher::Error::NoResourceVersion)), State::Empty)
                        }
                        (rv, continue_token) => (
                            None,
                            State::Listed {
                                resource_version: rv.unwrap_or_default(),
                                continue_token,
                                pods: list.items.into_iter(),
                            },
                        ),
                    }
                }
                Err(e) => {
                    log_error("list", &e);
                    (
                        Some(Err(watcher::Error::InitialListFailed(e))),
                        State::Empty,
                    )
                }
            }
        }
        State::Listed {
            resource_version,
            continue_token,
            mut pods,
        } => match (pods.next(), continue_token) {
            (Some(p), continue_token) => (
                Some(Ok(Event::InitApply(p))),
                State::Listed {
                    resource_version,
                    continue_token,
                    pods,
                },
            ),
            (None, Some(c)) => (
                None,
                State::Listing {
                    continue_token: Some(c),
                },
            ),
            // The last page's resourceVersion is the list's.
            (None, None) if resource_version.is_empty() => {
                (Some(Err(watcher::Error::NoResourceVersion)), State::Empty)
            }
            (None, None) => (
                Some(Ok(Event::InitDone)),
                State::InitListed { resource_version },
            ),
        },
        State::InitListed { resource_version } => {
            let api = Api::<StoredPod>::all(client.clone());
            match api.watch(&watch_params(wc), &resource_version).await {
                Ok(stream) => (
                    None,
                    State::Watching {
                        resource_version,
                        stream: stream.boxed(),
                    },
                ),
                Err(e) => {
                    log_error("watch start", &e);
                    (
                        Some(Err(watcher::Error::WatchStartFailed(e))),
                        State::InitListed { resource_version },
                    )
                }
            }
        }
        State::Watching {
            resource_version,
            mut stream,
        } => match next_or_idle(&mut stream, wc.timeout).await {
            Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))) => {
                watched(p, Event::Apply, stream)
            }
            Some(Ok(WatchEvent::Deleted(p))) => watched(p, Event::Delete, stream),
            Some(Ok(WatchEvent::Bookmark(b))) => (
                None,
                State::Watching {
                    resource_version: b.metadata.resource_version,
                    stream,
                },
            ),
            Some(Ok(WatchEvent::Error(status))) => {
                // 410 Gone: the watch fell out of the API server's window.
                let next = if status.code == 410 {
                    State::Empty
                } else {
                    State::Watching {
                        resource_version,
                        stream,
                    }
                };
                if status.code == 403 {
                    tracing::warn!("agent: pod watch: the API server refused it: {status:?}");
                } else {
                    tracing::debug!("agent: pod watch: an error event: {status:?}");
                }
                (Some(Err(watcher::Error::WatchError(status.boxed()))), next)
            }
            Some(Err(e)) => {
                log_error("watch", &e);
                (
                    Some(Err(watcher::Error::WatchFailed(e))),
                    State::Watching {
                        resource_version,
                        stream,
                    },
                )
            }
            None => {
                tracing::debug!("agent: pod watch: ended at resourceVersion {resource_version}");
                (None, State::InitListed { resource_version })
            }
        },
    }
}

/// An `Apply` or `Delete` of `p`, the watch going on from its
/// resourceVersion; without one, `NoResourceVersion` and a relist.
fn watched(
    p: StoredPod,
    event: fn(StoredPod) -> Event<StoredPod>,
    stream: BoxStream<'static, kube::Result<WatchEvent<StoredPod>>>,
) -> (Option<Result<Event<StoredPod>, watcher::Error>>, State) {
    match p
        .metadata
        .resource_version
        .clone()
        .filter(|v| !v.is_empty())
    {
        Some(resource_version) => (
            Some(Ok(event(p))),
            State::Watching {
                resource_version,
                stream,
            },
        ),
        None => (Some(Err(watcher::Error::NoResourceVersion)), State::Empty),
    }
}

/// A request's error: a refusal (403) as a warning, the rest at debug (the
/// reader of the stream counts and logs them).
fn log_error(what: &str, e: &kube::Error) {
    if matches!(e, kube::Error::Api(s) if s.is_forbidden()) {
        tracing::warn!("agent: pod {what}: the API server refused it: {e}");
    } else {
        tracing::debug!("agent: pod {what}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;
    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    type Body = StreamBody<stream::BoxStream<'static, Result<Frame<Bytes>, std::io::Error>>>;

    /// The fake API server's answers, in order: to lists, and to watches
    /// (a watch with none left stays open and silent); the URIs asked.
    #[derive(Default)]
    struct Script {
        lists: VecDeque<(u16, String)>,
        watches: VecDeque<String>,
        asked: Vec<String>,
    }

    /// `text` in chunks of 7 bytes, as a body read a piece at a time.
    fn chunked(text: String) -> Body {
        let chunks: Vec<Result<Frame<Bytes>, std::io::Error>> = text
            .into_bytes()
            .chunks(7)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        StreamBody::new(stream::iter(chunks).boxed())
    }

    fn client(script: Arc<Mutex<Script>>) -> Client {
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let script = script.clone();
            async move {
                let mut s = script.lock().expect("the script");
                let uri = req.uri().to_string();
                s.asked.push(uri.clone());
                let (status, body) = if uri.contains("watch=true") {
                    match s.watches.pop_front() {
                        Some(lines) => (200, chunked(lines)),
                        None => (200, StreamBody::new(stream::pending().boxed())),
                    }
                } else {
                    let (status, text) = s.lists.pop_front().unwrap_or((500, "{}".into()));
                    (status, chunked(text))
                };
                let resp = http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(body)
                    .expect("a response");
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        Client::new(svc, "default")
    }

    fn pod(name: &str, rv: u32) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"n","uid":"u-{name}","resourceVersion":"{rv}"}},"spec":{{"containers":[{{"name":"app"}}]}}}}"#
        )
    }

    fn list(rv: &str, cont: &str, pods: &[String]) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"PodList","metadata":{{"resourceVersion":"{rv}","continue":"{cont}"}},"items":[{}]}}"#,
            pods.join(",")
        )
    }

    fn line(kind: &str, object: &str) -> String {
        format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
    }

    /// The first `n` events of the watch, each as a short word (a watch
    /// that gives fewer within 10 s fails the test).
    async fn events(client: Client, list: WatchList, n: usize) -> Vec<String> {
        let wc = watcher::Config::default().fields("spec.nodeName=node");
        let got = pod_watcher(client, wc, list)
            .take(n)
            .map(|e| match e {
                Ok(Event::Init) => "Init".to_string(),
                Ok(Event::InitApply(p)) => {
                    format!("InitApply {}", p.metadata.name.unwrap_or_default())
                }
                Ok(Event::InitDone) => "InitDone".to_string(),
                Ok(Event::Apply(p)) => format!("Apply {}", p.metadata.name.unwrap_or_default()),
                Ok(Event::Delete(p)) => format!("Delete {}", p.metadata.name.unwrap_or_default()),
                Err(watcher::Error::InitialListFailed(kube::Error::SerdeError(_))) => {
                    "list undecodable".to_string()
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) => {
                    format!("list refused {}", s.code)
                }
                Err(watcher::Error::WatchError(s)) => format!("watch error {}", s.code),
                Err(e) => format!("error {e}"),
            })
            .collect();
        tokio::time::timeout(Duration::from_secs(10), got)
            .await
            .expect("the events within 10 s")
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    /// kube-runtime's watcher, event for event: pages, the watch from the
    /// list's resourceVersion, bookmarks, a watch that ends (started again
    /// from the last resourceVersion seen), 410 Gone (a relist).
    #[test]
    fn pages_then_the_watch_then_a_relist() {
        let script = Arc::new(Mutex::new(Script::default()));
        {
            let mut s = script.lock().expect("the script");
            s.lists.push_back((200, list("", "page2", &[pod("a", 3)])));
            s.lists.push_back((200, list("10", "", &[pod("b", 4)])));
            s.lists.push_back((200, list("20", "", &[pod("c", 11)])));
            s.watches.push_back(
                line("ADDED", &pod("c", 11))
                    + &line(
                        "BOOKMARK",
                        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}"#,
                    ),
            );
            s.watches.push_back(
                line("DELETED", &pod("a", 13))
                    + &line("ERROR", r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old"}"#),
            );
        }
        let got = rt()
            .block_on(async { events(client(script.clone()), WatchList::MostRecent, 10).await });
        assert_eq!(
            got,
            [
                "Init",
                "InitApply a",
                "InitApply b",
                "InitDone",
                "Apply c",
                "Delete a",
                "watch error 410",
                "Init",
                "InitApply c",
                "InitDone"
            ]
        );
        let asked = script.lock().expect("the script").asked.clone();
        assert_eq!(asked.len(), 5, "{asked:#?}");
        assert!(
            asked[0].contains("limit=500") && !asked[0].contains("continue"),
            "{}",
            asked[0]
        );
        assert!(asked[1].contains("continue=page2"), "{}", asked[1]);
        // The watch from the list's resourceVersion, then from the bookmark's.
        assert!(
            asked[2].contains("watch=true") && asked[2].contains("resourceVersion=10"),
            "{}",
            asked[2]
        );
        assert!(
            asked[2].contains("allowWatchBookmarks=true"),
            "{}",
            asked[2]
        );
        assert!(asked[3].contains("resourceVersion=12"), "{}", asked[3]);
        assert!(
            !asked[4].contains("watch=true") && !asked[4].contains("resourceVersion="),
            "{}",
            asked[4]
        );
        for a in &asked {
            assert!(a.contains("fieldSelector=spec.nodeName%3Dnode"), "{a}");
        }
    }

    /// `any`: one page (no limit), `resourceVersion=0`; a list that breaks
    /// off or is refused is an error, and the watch lists again.
    #[test]
    fn any_lists_once_from_the_cache_and_lists_again_after_an_error() {
        let script = Arc::new(Mutex::new(Script::default()));
        {
            let mut s = script.lock().expect("the script");
            let whole = list("7", "", &[pod("a", 3), pod("b", 4)]);
            s.lists
                .push_back((200, whole[..whole.len() / 2].to_string()));
            s.lists.push_back((403, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":403,"reason":"Forbidden","message":"no"}"#.into()));
            s.lists.push_back((200, whole));
        }
        let got = rt().block_on(async { events(client(script.clone()), WatchList::Any, 8).await });
        assert_eq!(
            got,
            [
                "Init",
                "list undecodable",
                "Init",
                "list refused 403",
                "Init",
                "InitApply a",
                "InitApply b",
                "InitDone"
            ]
        );
        let asked = script.lock().expect("the script").asked.clone();
        assert_eq!(asked.len(), 3, "{asked:#?}");
        for a in &asked {
            assert!(
                a.contains("resourceVersion=0") && !a.contains("limit="),
                "{a}"
            );
        }
    }
}
