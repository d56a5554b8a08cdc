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
//! while it is read (`serde_json::from_reader` on a blocking thread, handed
//! the body a chunk at a time), so the list costs the pods it holds and one
//! pod's JSON; a body that stops for [`LIST_IDLE`] is an error (kube's list
//! waits for ever), and a watch dropped mid-list ends its decoding.
//!
//! Everything else is kube-runtime's `watcher` (kube-runtime 5,
//! `watcher.rs`'s `step_trampolined`; the unit tests run both on the same
//! answers and compare), event for event, for the list-then-
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
use tokio::io::AsyncReadExt;
use tokio_util::compat::FuturesAsyncReadCompatExt;

/// How much longer than the config's timeout a silent watch is waited for
/// before it is started again (kube-runtime's `WATCH_IDLE_TIMEOUT_MARGIN`).
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// The list's body is read and handed to the decoding thread in chunks of
/// at most this many bytes.
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
/// and the API's error answers as `Client::request`'s (`Api::list`'s,
/// its tracing span named `list` too), the body handed a chunk at a time
/// to `serde_json::from_reader` on tokio's blocking pool. A body that gives
/// nothing for [`LIST_IDLE`] is given up; dropping the future ends the
/// decoding (its reader sees the body end).
///
/// # Errors
///
/// kube's: the request could not be built (`BuildRequest`), sent or was
/// answered with an error status (`Api`, ...), or its body is no pod list
/// (`SerdeError`, which also carries a body that broke off or stalled).
pub async fn list_pods(client: &Client, lp: &ListParams) -> kube::Result<ObjectList<StoredPod>> {
    list_pods_within(client, lp, LIST_IDLE).await
}

/// A list's body that gives no byte for this long is given up (an error,
/// then a relist after the backoff): kube's list waits for ever.
pub const LIST_IDLE: Duration = Duration::from_secs(120);

/// [`list_pods`] with `idle` for [`LIST_IDLE`].
async fn list_pods_within(
    client: &Client,
    lp: &ListParams,
    idle: Duration,
) -> kube::Result<ObjectList<StoredPod>> {
    let url = StoredPod::url_path(&(), None);
    let mut req = kube::core::Request::new(url)
        .list(lp)
        .map_err(kube::Error::BuildRequest)?;
    req.extensions_mut().insert("list");
    let mut body = client.request_stream(req).await?.compat();
    // Unbounded: the body is read as fast as it comes, as kube's client
    // reads it. With a channel of four chunks a slow decoder held the
    // connection open, and at 500 simulated nodes every agent restarted at
    // once made the API server read all pods from etcd once
    // (docs/benchmarks.md#the-agents-memory).
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let decode = tokio::task::spawn_blocking(move || {
        serde_json::from_reader::<_, ObjectList<StoredPod>>(Chunks {
            rx,
            chunk: Vec::new(),
            at: 0,
        })
    });
    // One read buffer; each chunk sent is a copy of what a read gave, of its
    // own size. (A 64 KiB buffer sent per read, truncated, kept its whole
    // capacity: a read gives about 8 KiB of the API server's answer, so a
    // backlog of chunks held eight times the bytes waiting, and a 250-pod
    // list peaked at 21-26 MiB; docs/benchmarks.md#huge-pages-and-the-lists-chunks.)
    let mut buf = vec![0; READ_BUFFER];
    let (mut reads, mut bytes) = (0u64, 0u64);
    loop {
        let item = match tokio::time::timeout(idle, body.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                reads += 1;
                bytes += n as u64;
                Ok(buf[..n].to_vec())
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the list's body gave nothing for {} s", idle.as_secs()),
            )),
        };
        let failed = item.is_err();
        // A send fails when the decoder has stopped: it reports why.
        if tx.send(item).is_err() || failed {
            break;
        }
    }
    drop(tx);
    tracing::debug!(reads, bytes, "the list's body read");
    decode
        .await
        .map_err(|e| kube::Error::Service(Box::new(e)))?
        .map_err(kube::Error::SerdeError)
}

/// The list's body as the decoding thread reads it: chunks from the async
/// side, in order; the channel closed is the body's end.
struct Chunks {
    rx: tokio::sync::mpsc::UnboundedReceiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    at: usize,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.chunk.len() {
            match self.rx.blocking_recv() {
                Some(Ok(c)) => (self.chunk, self.at) = (c, 0),
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
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
            // The last page has the list's resourceVersion (`Listing`
            // checked it).
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

    /// An answer of the fake API server's.
    #[derive(Clone)]
    enum Answer {
        /// A status and a body, sent whole.
        Whole(u16, String),
        /// 200, the body, then the connection broken.
        Broken(String),
        /// 200, the body, then nothing more, ever.
        Stalled(String),
    }

    /// The fake API server's answers, in order: to lists, and to watches
    /// (a watch with none left stays open and silent); the URIs asked.
    #[derive(Default, Clone)]
    struct Script {
        lists: VecDeque<Answer>,
        watches: VecDeque<String>,
        asked: Vec<String>,
    }

    /// `text` in chunks of 7 bytes, as a body read a piece at a time, then
    /// `tail` (the end, a broken connection, or nothing more).
    fn chunked(
        text: String,
        tail: stream::BoxStream<'static, Result<Frame<Bytes>, std::io::Error>>,
    ) -> Body {
        let chunks: Vec<Result<Frame<Bytes>, std::io::Error>> = text
            .into_bytes()
            .chunks(7)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        StreamBody::new(stream::iter(chunks).chain(tail).boxed())
    }

    fn client(script: Arc<Mutex<Script>>) -> Client {
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let script = script.clone();
            async move {
                let mut s = script.lock().expect("the script");
                let uri = req.uri().to_string();
                s.asked.push(uri.clone());
                let end = || stream::empty().boxed();
                let (status, body) = if uri.contains("watch=true") {
                    match s.watches.pop_front() {
                        Some(lines) => (200, chunked(lines, end())),
                        None => (200, chunked(String::new(), stream::pending().boxed())),
                    }
                } else {
                    match s.lists.pop_front() {
                        Some(Answer::Whole(status, text)) => (status, chunked(text, end())),
                        Some(Answer::Broken(text)) => {
                            let broken =
                                std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
                            (200, chunked(text, stream::iter([Err(broken)]).boxed()))
                        }
                        Some(Answer::Stalled(text)) => {
                            (200, chunked(text, stream::pending().boxed()))
                        }
                        None => (500, chunked("{}".into(), end())),
                    }
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

    fn status(code: u16) -> String {
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","code":{code},"reason":"R","message":"m"}}"#
        )
    }

    /// The first `n` events of `stream`, each as a short word (fewer within
    /// 10 s fails the test).
    async fn words(
        stream: impl futures_util::Stream<Item = Result<Event<StoredPod>, watcher::Error>>,
        n: usize,
    ) -> Vec<String> {
        let name = |p: StoredPod| p.metadata.name.unwrap_or_default();
        let got = stream
            .take(n)
            .map(|e| match e {
                Ok(Event::Init) => "Init".to_string(),
                Ok(Event::InitApply(p)) => format!("InitApply {}", name(p)),
                Ok(Event::InitDone) => "InitDone".to_string(),
                Ok(Event::Apply(p)) => format!("Apply {}", name(p)),
                Ok(Event::Delete(p)) => format!("Delete {}", name(p)),
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

    /// The first `n` events of meshnft's pod watch and the URIs it asked,
    /// each checked equal to kube-runtime's `watcher`'s (the one it
    /// replaces) on its own copy of `script`.
    fn as_kube(script: &Script, list: WatchList, n: usize) -> (Vec<String>, Vec<String>) {
        let wc = || watcher::Config::default().fields("spec.nodeName=node");
        let ours = Arc::new(Mutex::new(script.clone()));
        let kubes = Arc::new(Mutex::new(script.clone()));
        let (a, b) = rt().block_on(async {
            let a = words(pod_watcher(client(ours.clone()), wc(), list), n).await;
            let api = Api::<StoredPod>::all(client(kubes.clone()));
            let b = words(watcher::watcher(api, list.config(wc())), n).await;
            (a, b)
        });
        let asked = |s: &Arc<Mutex<Script>>| s.lock().expect("the script").asked.clone();
        assert_eq!(a, b, "kube-runtime's watcher's events");
        assert_eq!(
            asked(&ours),
            asked(&kubes),
            "kube-runtime's watcher's requests"
        );
        (a, asked(&ours))
    }

    /// kube-runtime's watcher, event for event and request for request:
    /// pages, the watch from the list's resourceVersion, bookmarks, an
    /// error event that is not 410 (the watch goes on), a watch that ends
    /// (started again from the last resourceVersion seen), 410 Gone (a
    /// relist).
    #[test]
    fn pages_then_the_watch_then_a_relist_as_kube() {
        let mut s = Script::default();
        s.lists
            .push_back(Answer::Whole(200, list("", "page2", &[pod("a", 3)])));
        s.lists
            .push_back(Answer::Whole(200, list("10", "", &[pod("b", 4)])));
        s.lists
            .push_back(Answer::Whole(200, list("20", "", &[pod("c", 11)])));
        s.watches.push_back(
            line("ADDED", &pod("c", 11))
                + &line(
                    "BOOKMARK",
                    r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}"#,
                )
                + &line("ERROR", &status(500)),
        );
        s.watches
            .push_back(line("DELETED", &pod("a", 13)) + &line("ERROR", &status(410)));
        let (ours, asked) = as_kube(&s, WatchList::MostRecent, 11);
        assert_eq!(
            ours,
            [
                "Init",
                "InitApply a",
                "InitApply b",
                "InitDone",
                "Apply c",
                "watch error 500",
                "Delete a",
                "watch error 410",
                "Init",
                "InitApply c",
                "InitDone"
            ]
        );
        assert_eq!(asked.len(), 5, "{asked:#?}");
        assert!(
            asked[0].contains("limit=500") && !asked[0].contains("continue"),
            "{}",
            asked[0]
        );
        assert!(asked[1].contains("continue=page2"), "{}", asked[1]);
        // The watch from the list's resourceVersion, then from the bookmark's.
        assert!(
            asked[2].contains("watch=true") && asked[2].ends_with("resourceVersion=10"),
            "{}",
            asked[2]
        );
        assert!(
            asked[2].contains("allowWatchBookmarks=true"),
            "{}",
            asked[2]
        );
        assert!(asked[3].ends_with("resourceVersion=12"), "{}", asked[3]);
        assert!(
            !asked[4].contains("watch=true") && !asked[4].contains("resourceVersion="),
            "{}",
            asked[4]
        );
        for a in &asked {
            assert!(a.contains("fieldSelector=spec.nodeName%3Dnode"), "{a}");
        }
    }

    /// `any`: one page (no limit) from the watch cache (`resourceVersion=0`,
    /// `NotOlderThan`); a list cut short, refused, or without a
    /// resourceVersion is an error, and the watch lists again; as kube's.
    #[test]
    fn any_lists_once_from_the_cache_and_again_after_an_error_as_kube() {
        let mut s = Script::default();
        let whole = list("7", "", &[pod("a", 3), pod("b", 4)]);
        s.lists
            .push_back(Answer::Whole(200, whole[..whole.len() / 2].to_string()));
        s.lists.push_back(Answer::Whole(403, status(403)));
        s.lists
            .push_back(Answer::Whole(200, list("", "", &[pod("a", 3)])));
        s.lists.push_back(Answer::Whole(200, whole));
        let (ours, asked) = as_kube(&s, WatchList::Any, 10);
        assert_eq!(
            ours,
            [
                "Init",
                "list undecodable",
                "Init",
                "list refused 403",
                "Init",
                "error no metadata.resourceVersion in watch result (does resource support watch?)",
                "Init",
                "InitApply a",
                "InitApply b",
                "InitDone"
            ]
        );
        assert_eq!(asked.len(), 4, "{asked:#?}");
        for a in &asked {
            assert!(
                a.contains("resourceVersion=0&resourceVersionMatch=NotOlderThan")
                    && !a.contains("limit="),
                "{a}"
            );
        }
    }

    /// A list whose connection breaks midway, and one that stalls, are
    /// errors (kube's would wait for ever on the second), then a relist.
    #[test]
    fn a_broken_or_stalled_list_is_an_error() {
        let mut s = Script::default();
        let whole = list("7", "", &[pod("a", 3)]);
        s.lists.push_back(Answer::Broken(whole[..20].to_string()));
        s.lists.push_back(Answer::Stalled(whole[..20].to_string()));
        s.lists.push_back(Answer::Whole(200, whole));
        let s = Arc::new(Mutex::new(s));
        rt().block_on(async {
            let c = client(s.clone());
            let lp = list_params(&WatchList::Any.config(watcher::Config::default()), None);
            let broken = list_pods_within(&c, &lp, Duration::from_secs(1)).await;
            assert!(
                matches!(&broken, Err(kube::Error::SerdeError(e)) if e.is_io()),
                "{broken:?}"
            );
            let stalled = list_pods_within(&c, &lp, Duration::from_secs(1)).await;
            assert!(
                matches!(&stalled, Err(kube::Error::SerdeError(e)) if e.to_string().contains("gave nothing")),
                "{stalled:?}"
            );
            let whole = list_pods_within(&c, &lp, Duration::from_secs(1)).await.expect("the list");
            assert_eq!(whole.items.len(), 1);
        });
    }

    /// A watch dropped while its list is being read leaves no thread behind
    /// (the runtime's shutdown waits for its blocking threads: it returns).
    #[test]
    fn a_watch_dropped_midway_through_its_list_ends_its_decoding() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut s = Script::default();
            s.lists.push_back(Answer::Stalled(
                list("7", "", &[pod("a", 3)])[..30].to_string(),
            ));
            let s = Arc::new(Mutex::new(s));
            let rt = rt();
            rt.block_on(async {
                let wc = watcher::Config::default().fields("spec.nodeName=node");
                let mut w = pod_watcher(client(s.clone()), wc, WatchList::Any);
                assert!(matches!(w.next().await, Some(Ok(Event::Init))));
                let next = tokio::time::timeout(Duration::from_millis(500), w.next()).await;
                assert!(next.is_err(), "the stalled list gave an event");
            });
            drop(rt);
            let _ = done.send(());
        });
        finished
            .recv_timeout(Duration::from_secs(10))
            .expect("the runtime shut down: no decoding thread left reading");
    }
}
