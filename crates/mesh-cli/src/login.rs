//! `mesh login` on a person's own machine: with the one-time token `mesh
//! person add --role` printed (on standard input), the person's key is made
//! here — only its public half leaves — and recorded by the active
//! controller as the login spends; or with a key made before (`mesh person
//! key`, added with `--nkey`). Either way the broker must admit the key and
//! the controller answer the person before a context is written.

use std::io::{IsTerminal as _, Read as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_core::authority::PrincipalKind;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{LoginRequest, Reply};
use mesh_core::token::PersonToken;

use crate::context::{self, Context};
use crate::output;
use crate::remote::Asker;

/// Where a token may come from besides standard input.
const TOKEN_ENV: &str = "MESH_LOGIN_TOKEN";
/// How long the controller has to spend the login, and the broker to
/// admit the key it recorded.
const WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// With a key made before: the person, as `mesh person add` recorded
    /// them. Without --key, the token (on standard input, or in
    /// MESH_LOGIN_TOKEN) names the person and the bus.
    #[arg(long, requires = "key")]
    pub person: Option<String>,
    /// The person's seed file (from `mesh person key`, mode 0600).
    #[arg(long, value_name = "FILE", requires_all = ["person", "urls", "pin"])]
    pub key: Option<PathBuf>,
    /// With --key: the bus's address (`tls://HOST:PORT`); repeat or
    /// comma-separate every server of a cluster.
    #[arg(
        long = "bus",
        value_name = "URL",
        value_delimiter = ',',
        requires = "key"
    )]
    pub urls: Vec<String>,
    /// With --key: the broker certificate's SHA-256, as `mesh person add`
    /// prints it.
    #[arg(long, value_name = "SHA256", requires = "key")]
    pub pin: Option<String>,
    /// The context's name [default: the person's].
    #[arg(long)]
    pub name: Option<String>,
}

pub fn login(args: &LoginArgs) -> anyhow::Result<ExitCode> {
    let ctx = match (&args.key, &args.person, &args.pin) {
        (Some(key), Some(person), Some(pin)) => Context {
            urls: nats_addresses(&args.urls)?,
            name: args.name.clone().unwrap_or_else(|| person.clone()),
            person: person.clone(),
            pin: pin.clone(),
            key_file: std::fs::canonicalize(key)
                .with_context(|| format!("reading {}", key.display()))?,
        },
        _ => crate::block_on(with_token(args.name.clone()))??,
    };
    // Proven before it is written: the broker admits the key and the
    // controller answers the person.
    let nodes = crate::block_on(async {
        let asker = Asker::connect(ctx.clone()).await?;
        asker.ask(Operation::Nodes, serde_json::Value::Null).await
    })??;
    if let Reply::Refused { reason } = nodes {
        bail!("the controller refused person {}: {reason}", ctx.person);
    }
    let path = context::save(&ctx)?;
    output::print(&format!(
        "logged in as person {} (context {}, in {}); commands without a mesh directory use it\n",
        ctx.person,
        ctx.name,
        path.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// The addresses given with --bus, all of one bus, which a person's key
/// (an NKey) can log in on: NATS.
fn nats_addresses(urls: &[String]) -> anyhow::Result<Vec<String>> {
    use mesh_core::bus::{BusKind, Given, bus_of};
    let bus = bus_of(urls.iter().map(|u| Given {
        source: "--bus",
        address: u,
    }))?;
    if bus != BusKind::Nats {
        bail!(
            "--bus names a mesh on {bus}; a key from `mesh person key` logs in on nats (tls://HOST:PORT)"
        );
    }
    Ok(urls.to_vec())
}

/// The token read from MESH_LOGIN_TOKEN or standard input: never an
/// argument, which any user of this machine can read.
fn read_token() -> anyhow::Result<PersonToken> {
    let text = match std::env::var(TOKEN_ENV)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        Some(t) => t,
        None => {
            if std::io::stdin().is_terminal() {
                bail!(
                    "give the login token on standard input (`mesh login < ada.token`) or in {TOKEN_ENV}; or log in with a key made before: --person NAME --key FILE --bus URL --pin SHA256"
                );
            }
            let mut t = String::new();
            std::io::stdin()
                .read_to_string(&mut t)
                .context("reading the token from standard input")?;
            t
        }
    };
    let token = PersonToken::decode(&text)?;
    token.ensure_fresh(u64::try_from(mesh_store::now_ms()).unwrap_or(0))?;
    Ok(token)
}

/// Spends the token: a key made here, its public half recorded by the
/// controller, then admitted by the broker; the context it makes.
async fn with_token(name: Option<String>) -> anyhow::Result<Context> {
    let token = read_token()?;
    let person = token.person.clone();
    let name = name.unwrap_or_else(|| person.to_string());
    // The person's key, made here: its seed never leaves this machine.
    let home = context::home()?;
    std::fs::create_dir_all(&home).with_context(|| format!("making {}", home.display()))?;
    let key_file = home.join(format!("{name}.seed"));
    let kp = nkeys::KeyPair::new_user();
    let seed = kp.seed().context("encoding the new seed")?;
    let written = {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key_file)
            .and_then(|mut f| {
                f.write_all(format!("{seed}\n").as_bytes())
                    .and_then(|()| f.sync_all())
            })
    };
    written.with_context(|| {
        format!(
            "writing the key to {} (an existing one is never replaced: remove it, or give --name for another context)",
            key_file.display()
        )
    })?;
    let spent = spend(&token, &kp.public_key()).await;
    if let Err(e) = spent {
        // Nothing recorded it: no key is left behind for it.
        let _ = std::fs::remove_file(&key_file);
        return Err(e);
    }
    let ctx = Context {
        name,
        person: person.to_string(),
        urls: token.bus_urls.clone(),
        pin: token.cert_sha256.clone(),
        key_file,
    };
    // The controller composes the key into the users file at once; the
    // broker admits it once it has reloaded.
    let started = std::time::Instant::now();
    loop {
        match Asker::connect(ctx.clone()).await {
            Ok(_) => return Ok(ctx),
            Err(e) if started.elapsed() > WITHIN => {
                return Err(e.context(format!(
                    "the controller recorded person {person}'s key, but the broker did not admit it within {WITHIN:?}; try `mesh login` with --key {} later",
                    ctx.key_file.display()
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Asks the active controller, as the login's principal, to record
/// `person_key`.
async fn spend(token: &PersonToken, person_key: &str) -> anyhow::Result<()> {
    let kind = PrincipalKind::Login {
        person: token.person.clone(),
    };
    let principal = kind.principal_name();
    let login_key = nkeys::KeyPair::from_seed(token.login_seed.expose())
        .context("reading the token's login key")?
        .public_key();
    let cfg = BusConfig {
        url: token.bus_urls.join(","),
        principal: principal.clone(),
        credential: ClientCredential::NKey(Secret::new(token.login_seed.expose().to_string())),
        ca_file: None,
        inbox_prefix: Some(mesh_core::subjects::inbox_prefix(&principal)),
        pin: Some(CertPin::from_hex(&token.cert_sha256)?),
    };
    let client = mesh_bus::connect(&cfg).await.with_context(|| {
        format!(
            "connecting with the login token of person {} (spent, expired, or this mesh's broker is not at {})",
            token.person,
            token.bus_urls.join(", ")
        )
    })?;
    let body = serde_json::to_vec(&LoginRequest {
        login_key,
        person_key: person_key.to_string(),
    })?;
    let asked = client.request(mesh_core::subjects::login(&token.person), body.into());
    let msg = match tokio::time::timeout(WITHIN, asked).await {
        Err(_) => bail!("the controller did not answer the login within {WITHIN:?}"),
        Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => bail!(
            "no active controller answers: it is stopped, or a standby is taking over; the token stays usable until it expires, try again shortly"
        ),
        Ok(r) => r.context("asking the controller to record the key")?,
    };
    match serde_json::from_slice(&msg.payload).context("the controller's answer does not read")? {
        Reply::Done { .. } => Ok(()),
        Reply::Refused { reason } => bail!("{reason}"),
    }
}
