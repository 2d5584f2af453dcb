//! Asking the active controller for an operation, as the person of the
//! current context: `mesh login` and `mesh context`, and the commands that
//! work from a person's own machine. The server says who asks (the
//! subject is the person's own) and refuses what their role does not
//! allow; the refusal is heard at once, not after a timeout.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::Reply;

use crate::context::{self, Context};
use crate::output;

/// How long an answer may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, Args)]
pub struct ContextArgs {
    #[command(subcommand)]
    pub command: ContextCommand,
}

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Every context; `*` marks the one in use.
    #[command(after_help = "Example:\n  mesh context list")]
    List,
    /// Use another context from now on.
    #[command(after_help = "Example:\n  mesh context use prod")]
    Use { name: String },
}

/// A connection as the context's person, hearing the server's refusals.
pub struct Asker {
    ctx: Context,
    client: async_nats::Client,
    refusals: mesh_bus::Refusals,
}

impl Asker {
    pub async fn connect(ctx: Context) -> anyhow::Result<Asker> {
        let seed = crate::person::read_seed(&ctx.key_file)?;
        let pin = CertPin::from_hex(&ctx.pin)
            .with_context(|| format!("the pin of context {}", ctx.name))?;
        let person = Name::new(&ctx.person)
            .with_context(|| format!("{:?} is not a person name", ctx.person))?;
        let principal = mesh_core::authority::PrincipalKind::Person { person }.principal_name();
        let cfg = BusConfig {
            url: ctx.urls.join(","),
            principal: principal.clone(),
            credential: ClientCredential::NKey(Secret::new(
                seed.seed().context("reading the person's seed")?,
            )),
            ca_file: None,
            inbox_prefix: Some(mesh_core::subjects::inbox_prefix(&principal)),
            pin: Some(pin),
        };
        let (client, refusals) = mesh_bus::connect_hearing(&cfg).await.with_context(|| {
            format!(
                "connecting to the mesh of context {} as person {}",
                ctx.name, ctx.person
            )
        })?;
        Ok(Asker {
            ctx,
            client,
            refusals,
        })
    }

    /// The person of the context.
    pub fn person(&self) -> anyhow::Result<Name> {
        Name::new(&self.ctx.person)
            .with_context(|| format!("{:?} is not a person name", self.ctx.person))
    }

    /// The connection, as the person.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The server's refusals heard on the connection.
    pub fn refusals(&self) -> &mesh_bus::Refusals {
        &self.refusals
    }

    /// The broker refused publishing to `subject`, which `op` takes: the
    /// role that would allow it named.
    pub fn refused(&self, subject: &str, op: Operation) -> anyhow::Error {
        anyhow::anyhow!(
            "the broker refused publishing to {subject}: person {} may not ask for `{op}` (it takes the {} role; an admin: mesh person add {} --role {} …)",
            self.ctx.person,
            op.role(),
            self.ctx.person,
            op.role()
        )
    }

    /// `op` with `args`: the controller's answer, or why there is none.
    pub async fn ask(&self, op: Operation, args: serde_json::Value) -> anyhow::Result<Reply> {
        let person = Name::new(&self.ctx.person)
            .with_context(|| format!("{:?} is not a person name", self.ctx.person))?;
        let subject = mesh_core::subjects::operation(&person, op);
        let body = serde_json::json!({ "id": request_id(), "args": args });
        let mut refused = self.refusals.watch();
        let asked = self
            .client
            .request(subject.clone(), body.to_string().into());
        let answer = tokio::select! {
            r = tokio::time::timeout(ANSWER_WITHIN, asked) => r,
            _ = refused.refused(|r| r.subject == subject) => return Err(self.refused(&subject, op)),
        };
        let msg = match answer {
            Err(_) => bail!("the controller did not answer `{op}` within {ANSWER_WITHIN:?}"),
            Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => bail!(
                "no active controller answers on the mesh of context {}: it is stopped, or a standby is taking over; try again shortly",
                self.ctx.name
            ),
            Ok(r) => r.with_context(|| format!("asking the controller for `{op}`"))?,
        };
        serde_json::from_slice(&msg.payload)
            .with_context(|| format!("the controller's answer to `{op}` does not read"))
    }
}

/// Unique per request: the time and this process's id, with randomness.
fn request_id() -> String {
    use rand::Rng as _;
    format!(
        "{}-{}-{:016x}",
        mesh_store::now_ms(),
        std::process::id(),
        rand::rng().random::<u64>()
    )
}

/// `op` asked as the current context's person: the data of a read, or the
/// said line of a change; a refusal as the command's error.
pub async fn ask_current(
    ctx: Context,
    op: Operation,
    args: serde_json::Value,
) -> anyhow::Result<(String, serde_json::Value)> {
    let asker = Asker::connect(ctx).await?;
    match asker.ask(op, args).await? {
        Reply::Done { said, data, .. } => Ok((said, data)),
        Reply::Refused { reason } => bail!("refused: {reason}"),
    }
}

/// A change asked as the context's person, from a command that blocks:
/// the line to print.
pub fn change(ctx: Context, op: Operation, args: &impl serde::Serialize) -> anyhow::Result<String> {
    let args = serde_json::to_value(args)?;
    let (said, _) = crate::block_on(ask_current(ctx, op, args))??;
    Ok(said)
}

/// A read (`nodes`, `modules`) asked as the context's person: its rows, as
/// the same views the store gives on the controller's machine.
pub async fn read<T: serde::de::DeserializeOwned>(
    ctx: Context,
    op: Operation,
) -> anyhow::Result<T> {
    read_with(ctx, op, serde_json::Value::Null).await
}

/// A read with arguments.
pub async fn read_with<T: serde::de::DeserializeOwned>(
    ctx: Context,
    op: Operation,
    args: serde_json::Value,
) -> anyhow::Result<T> {
    let (_, data) = ask_current(ctx, op, args).await?;
    serde_json::from_value(data)
        .with_context(|| format!("the controller's answer to `{op}` does not read"))
}

pub fn run_context(args: &ContextArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        ContextCommand::List => {
            let (all, current) = context::list()?;
            let mut out = output::Stdout::lock();
            if all.is_empty() {
                out.line("no context; `mesh login` makes one")?;
            }
            for c in &all {
                let mark = if current.as_deref() == Some(c.name.as_str()) {
                    "*"
                } else {
                    " "
                };
                out.line(format_args!(
                    "{mark} {:<16} person {:<12} {}",
                    c.name,
                    c.person,
                    c.urls.join(",")
                ))?;
            }
            out.flush()?;
        }
        ContextCommand::Use { name } => {
            context::use_context(name)?;
            output::print(&format!("using context {name}\n"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
