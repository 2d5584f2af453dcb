//! Tools: request/reply operations a module serves and others call.
//!
//! A tool is written as in a manifest: `<module>.<tool>` or
//! `seat:<seat>.<tool>`. Serving on NATS uses a queue group named after the
//! tool's subject, so a tool served by several instances is answered once
//! (authority says who may serve; the group says who does). On AMQP every
//! instance hears each call and the caller takes the first answer
//! ([`Bus::subscribe_shared`]).

use std::future::Future;
use std::time::Duration;

use mesh_bus::seam::{Bus, SeamError};
use mesh_core::manifest::refs::parse_tool_ref;
use mesh_core::manifest::{Target, ToolRef};
use mesh_core::subjects;
use mesh_core::tool::{self, ToolReply};
use tokio::task::JoinHandle;

use crate::refusal::Denied;
use crate::{Module, SdkError};

/// How long [`Module::call`] waits for an answer by default.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after the server confirmed a subscription a refusal of it may
/// still be on its way to the callback that hears it.
const REFUSAL_GRACE: Duration = Duration::from_millis(250);

/// Where a tool is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAddress {
    /// As written (`echo.say`, `seat:git.clone`).
    pub written: String,
    pub subject: String,
}

impl ToolAddress {
    /// A tool written as in a manifest, on a module or a mesh-scoped seat.
    pub fn parse(written: &str) -> Result<ToolAddress, SdkError> {
        let r = tool_ref(written)?;
        Ok(ToolAddress {
            written: written.to_string(),
            subject: r.subject(),
        })
    }

    /// A node-scoped seat's tool as answered by `node`'s holder
    /// (`seat:packet-filter.rules` on n1).
    pub fn on_node(written: &str, node: &str) -> Result<ToolAddress, SdkError> {
        let r = tool_ref(written)?;
        let node = crate::name("node", node)?;
        match &r.provider {
            Target::Seat(seat) => Ok(ToolAddress {
                written: format!("{written} on {node}"),
                subject: subjects::seat_node_tool(seat, &node, &r.tool),
            }),
            Target::Module(_) => Err(SdkError::Call {
                tool: written.to_string(),
                subject: r.subject(),
                reason: "only a seat's tool is answered per node; write seat:<seat>.<tool>".into(),
            }),
        }
    }
}

fn tool_ref(written: &str) -> Result<ToolRef, SdkError> {
    parse_tool_ref(written).map_err(|e| SdkError::Call {
        tool: written.to_string(),
        subject: String::new(),
        reason: format!("{e}; write <module>.<tool> or seat:<seat>.<tool>"),
    })
}

/// A tool being served; stops serving when dropped.
#[derive(Debug)]
pub struct Serving {
    pub subject: String,
    task: JoinHandle<()>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Module {
    /// Serves this module's own tool `tool` (`mesh.mod.<module>.tool.<tool>`).
    pub async fn serve<H, F>(&self, tool: &str, handler: H) -> Result<Serving, SdkError>
    where
        H: Fn(serde_json::Value) -> F + Send + Sync + 'static,
        F: Future<Output = Result<serde_json::Value, String>> + Send + 'static,
    {
        let tool = crate::name("tool", tool)?;
        self.serve_on(subjects::module_tool(self.module(), &tool), handler)
            .await
    }

    /// Serves tool `tool` of a seat this module holds. For a node-scoped
    /// seat (`node_scoped`), only the calls addressed to this node.
    pub async fn serve_seat<H, F>(
        &self,
        seat: &str,
        tool: &str,
        node_scoped: bool,
        handler: H,
    ) -> Result<Serving, SdkError>
    where
        H: Fn(serde_json::Value) -> F + Send + Sync + 'static,
        F: Future<Output = Result<serde_json::Value, String>> + Send + 'static,
    {
        let seat = crate::name("seat", seat)?;
        let tool = crate::name("tool", tool)?;
        let subject = if node_scoped {
            subjects::seat_node_tool(&seat, self.node(), &tool)
        } else {
            subjects::seat_tool(&seat, &tool)
        };
        self.serve_on(subject, handler).await
    }

    async fn serve_on<H, F>(&self, subject: String, handler: H) -> Result<Serving, SdkError>
    where
        H: Fn(serde_json::Value) -> F + Send + Sync + 'static,
        F: Future<Output = Result<serde_json::Value, String>> + Send + 'static,
    {
        let refused = self.refusal(Denied::Subscription, &subject);
        let subscribed = self.bus().subscribe_shared(&subject, &subject).await;
        let mut requests = match subscribed {
            Ok(r) => r,
            Err(e) if e.is_access_refused() => {
                return Err(SdkError::ServeRefused {
                    module: self.module().clone(),
                    subject,
                });
            }
            Err(e) => {
                return Err(SdkError::Serve {
                    subject,
                    reason: crate::chain(&e),
                });
            }
        };
        // NATS answers a refused subscription with an error on the
        // connection, not a failed SUB: the subscription was flushed, so
        // listen a moment for it, and a module learns now rather than by
        // never being called. AMQP refused the binding itself.
        if matches!(self.bus(), Bus::Nats(_))
            && tokio::time::timeout(REFUSAL_GRACE, refused).await.is_ok()
        {
            return Err(SdkError::ServeRefused {
                module: self.module().clone(),
                subject,
            });
        }
        let bus = self.shared_bus();
        let handler = std::sync::Arc::new(handler);
        let task = tokio::spawn(async move {
            while let Some(Ok(request)) = requests.next().await {
                // A request without a reply address cannot be answered.
                if request.reply.is_none() {
                    continue;
                }
                let bus = bus.clone();
                let handler = handler.clone();
                tokio::spawn(async move {
                    let answer = match tool::parse_request(&request.payload) {
                        Ok(payload) => match handler(payload).await {
                            Ok(v) => ToolReply::Ok(v),
                            Err(e) => ToolReply::Error(e),
                        },
                        Err(e) => ToolReply::Error(e.to_string()),
                    };
                    // A caller that gave up is no reason to stop serving.
                    let _ = bus.respond(&request, &answer.to_json()).await;
                });
            }
        });
        Ok(Serving { subject, task })
    }

    /// Calls `tool` (written as in a manifest) with `payload` and returns its
    /// answer. A tool this module may not call is refused by the server and
    /// reported as [`SdkError::CallRefused`] at once, not after a timeout;
    /// one nobody serves is [`SdkError::NoServer`].
    pub async fn call(
        &self,
        tool: &str,
        payload: serde_json::Value,
    ) -> Result<serde_json::Value, SdkError> {
        self.call_at(&ToolAddress::parse(tool)?, payload, DEFAULT_CALL_TIMEOUT)
            .await
    }

    /// [`Module::call`] at an address ([`ToolAddress::on_node`] for a
    /// node-scoped seat's tool), with a timeout.
    pub async fn call_at(
        &self,
        tool: &ToolAddress,
        payload: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, SdkError> {
        call(
            self.bus(),
            self.refusal(Denied::Publish, &tool.subject),
            &self.principal(),
            tool,
            payload,
            timeout,
        )
        .await
    }
}

/// A call on any connection: the SDK's and `mesh call`'s. `refused` resolves
/// when the server refuses publishing to the tool's subject (heard on a NATS
/// connection; AMQP refuses the publish itself).
pub async fn call(
    bus: &Bus,
    refused: impl Future<Output = ()>,
    principal: &str,
    tool: &ToolAddress,
    payload: serde_json::Value,
    timeout: Duration,
) -> Result<serde_json::Value, SdkError> {
    let failed = |reason: String| SdkError::Call {
        tool: tool.written.clone(),
        subject: tool.subject.clone(),
        reason,
    };
    let refused_now = || SdkError::CallRefused {
        principal: principal.to_string(),
        tool: tool.written.clone(),
        subject: tool.subject.clone(),
        hint: "a module must declare the tool under [tools] uses; a person must be given it with `mesh person add NAME --tools`",
    };
    let timed_out = || SdkError::CallTimeout {
        tool: tool.written.clone(),
        subject: tool.subject.clone(),
        timeout,
    };
    let bytes = serde_json::to_vec(&payload).map_err(|e| failed(e.to_string()))?;
    let asked = bus.request(&tool.subject, &bytes, timeout);
    let answer = tokio::select! {
        () = refused => return Err(refused_now()),
        r = tokio::time::timeout(timeout, asked) => r,
    };
    let answer = match answer {
        Ok(Ok(a)) => a,
        Err(_) | Ok(Err(SeamError::NoAnswer { .. })) => return Err(timed_out()),
        Ok(Err(SeamError::NoResponders { .. })) => {
            return Err(SdkError::NoServer {
                tool: tool.written.clone(),
                subject: tool.subject.clone(),
            });
        }
        Ok(Err(e)) if e.is_access_refused() => return Err(refused_now()),
        Ok(Err(e)) => return Err(failed(crate::chain(&e))),
    };
    match tool::parse_reply(&answer) {
        Ok(ToolReply::Ok(v)) => Ok(v),
        Ok(ToolReply::Error(message)) => Err(SdkError::ToolFailed {
            tool: tool.written.clone(),
            message,
        }),
        Err(e) => Err(failed(e.to_string())),
    }
}
