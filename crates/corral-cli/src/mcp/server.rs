//! The protocol side: the MCP server (official SDK `rmcp`) over stdio, on
//! one tokio reactor thread, and the shutdown that kills every run.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;

use super::limits::Limits;
use super::runs::Registry;
use super::sessions::{self, Sessions};
use super::tools::{self, Tools};
use super::McpOpts;
use crate::exit::CORRAL_FAILED;

/// How long the shutdown waits for the killed trees to be confirmed dead.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(15);

/// The handler the SDK calls.
struct Server {
    tools: Arc<Tools>,
    sessions: Arc<Sessions>,
    list: Vec<Tool>,
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(
                "Runs commands with a deadline; each run's whole process tree is contained \
                 and killed on timeout, idle timeout, output limit or kill. Use run for a \
                 command to its end, start/read/write/kill for a background one, \
                 session_start/session_run/session_close for a persistent shell whose \
                 directory and variables carry over between commands.",
            );
        info.server_info = Implementation::new("corral", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.list.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tools = self.tools.clone();
        let sessions = self.sessions.clone();
        let call = async move {
            match sessions
                .call(&tools, &request.name, request.arguments.clone())
                .await
            {
                Some(r) => Ok(r),
                None => tools.call(&request.name, request.arguments).await,
            }
        };
        // A request the client cancels (notifications/cancelled) stops
        // here: its run future is dropped, which kills the run's tree.
        tokio::select! {
            r = call => r.map(Into::into),
            () = context.ct.cancelled() => {
                Err(ErrorData::internal_error("the request was cancelled", None))
            }
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.list.iter().find(|t| t.name == name).cloned()
    }
}

/// Serves until stdin closes or a terminating signal comes, then kills
/// every run and exits: 0, or 125 when the server could not start.
pub fn serve(opts: McpOpts) -> i32 {
    let limits = match Limits::new(&opts) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("corral: {e}");
            return CORRAL_FAILED;
        }
    };
    // The crash-safety keeper now, while the process is small; the server
    // starts no child of its own, so it may be the subreaper and reap
    // every orphan (as `corral run` does).
    corral::process_wide::start_keeper();
    #[cfg(target_os = "linux")]
    {
        let _ = corral::process_wide::enable_subreaper();
        corral::process_wide::reap_all_orphans();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("corral: cannot start the reactor: {e}");
            return CORRAL_FAILED;
        }
    };
    let runs = Arc::new(Registry::new(limits.max_runs));
    let tools = Arc::new(Tools {
        limits,
        runs: runs.clone(),
    });
    let sessions = Arc::new(Sessions::default());
    let code = rt.block_on(async move {
        let mut stops = Vec::new();
        for kind in [
            SignalKind::terminate(),
            SignalKind::interrupt(),
            SignalKind::hangup(),
        ] {
            match signal(kind) {
                Ok(s) => stops.push(s),
                Err(e) => {
                    eprintln!("corral: cannot watch signals: {e}");
                    return CORRAL_FAILED;
                }
            }
        }
        let [term, int, hup] = &mut stops[..] else {
            return CORRAL_FAILED;
        };
        let mut list = tools::list(&tools.limits);
        list.extend(sessions::list(&tools.limits));
        let server = Server {
            tools,
            sessions: sessions.clone(),
            list,
        };
        // The end of stdin ends the server at once: the SDK would go on
        // serving the requests in flight for a while, their trees with them.
        let eof = Arc::new(Notify::new());
        let stdin = EofReader {
            inner: tokio::io::stdin(),
            eof: eof.clone(),
        };
        let served = async {
            match server.serve((stdin, tokio::io::stdout())).await {
                Ok(service) => {
                    let _ = service.waiting().await;
                }
                // The client went away (or spoke nonsense) before
                // initializing: nothing ran.
                Err(e) => eprintln!("corral: mcp: {e}"),
            }
        };
        tokio::select! {
            () = served => {}
            () = eof.notified() => {}
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        let left = runs.shutdown(SHUTDOWN_BOUND).await;
        // The sessions' background jobs (their commands were cancelled).
        let _ = tokio::task::spawn_blocking(move || sessions.close_all()).await;
        if left > 0 {
            eprintln!(
                "corral: mcp: {left} run(s) not confirmed dead within {} s of SIGKILL",
                SHUTDOWN_BOUND.as_secs()
            );
            return CORRAL_FAILED;
        }
        0
    });
    // Whatever is still pending (a blocked stdin read) is dropped, not
    // waited for; a run future dropped here kills its tree.
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

/// The server's stdin, telling `eof` when it ends (or fails).
struct EofReader<R> {
    inner: R,
    eof: Arc<Notify>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &r {
            Poll::Ready(Ok(())) if buf.filled().len() == before && buf.remaining() > 0 => {
                self.eof.notify_one();
            }
            Poll::Ready(Err(_)) => self.eof.notify_one(),
            _ => {}
        }
        r
    }
}
