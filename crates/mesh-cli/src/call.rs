//! `mesh call TOOL [JSON] --as SEEDFILE`: a person calls a tool and the
//! answer is printed. A tool the person may not call is refused by the
//! server and said so at once, naming the tool and the person, not after a
//! timeout.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use mesh_bus::seam::{Bus, NatsSide};
use mesh_bus::{BusConfig, CertPin, ClientCredential, Secret};
use mesh_controller::Genesis;
use mesh_core::authority::PrincipalKind;
use mesh_core::catalogue::Catalogue;
use mesh_core::diagnostic::suggest;
use mesh_core::manifest::{Target, ToolRef};
use mesh_core::names::Name;
use mesh_core::subjects;
use mesh_sdk::{Denied, SdkError, ServerErrors, ToolAddress};

use crate::authority::open_existing_store;
use crate::node::parse_ttl;
use crate::output;
use crate::person::read_seed;
use crate::state::MeshArgs;

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool, as a manifest writes it: `module.tool` or `seat:seat.tool`.
    pub tool: String,
    /// The request: any JSON value (default `null`).
    pub payload: Option<String>,
    /// The person's seed file (from `mesh person key`).
    #[arg(long = "as", value_name = "SEEDFILE")]
    pub seed: PathBuf,
    /// The person's name; default: the person the store records the seed's
    /// public key for.
    #[arg(long)]
    pub person: Option<String>,
    /// For a node-scoped seat's tool: the node whose holder answers.
    #[arg(long)]
    pub node: Option<String>,
    /// How long to wait for the answer.
    #[arg(long, default_value = "10s", value_parser = parse_ttl)]
    pub timeout: Duration,
    #[command(flatten)]
    pub mesh: MeshArgs,
}

pub fn run(args: &CallArgs) -> anyhow::Result<ExitCode> {
    let payload: serde_json::Value = match &args.payload {
        None => serde_json::Value::Null,
        Some(text) => serde_json::from_str(text).with_context(|| {
            format!("the request {text:?} is not JSON; write e.g. '{{\"name\": \"ada\"}}'")
        })?,
    };
    let address = match &args.node {
        None => ToolAddress::parse(&args.tool),
        Some(node) => ToolAddress::on_node(&args.tool, node),
    }?;
    let kp = read_seed(&args.seed)?;
    let genesis = Genesis::open(&args.mesh.dir()?)?;
    let answer = crate::block_on(async {
        let person = match &args.person {
            Some(p) => Name::new(p).with_context(|| format!("{p:?} is not a person name"))?,
            None => person_of(&args.mesh, &kp.public_key()).await?,
        };
        let principal = PrincipalKind::Person {
            person: person.clone(),
        }
        .principal_name();
        let urls = crate::bus::local_urls(&genesis, &args.mesh.store_url()?).await?;
        if urls
            .iter()
            .any(|u| mesh_core::bus::BusKind::of_address(u) == Some(mesh_core::bus::BusKind::Amqp))
        {
            anyhow::bail!(
                "`mesh call` speaks NATS, and this mesh runs on RabbitMQ ({}): a module calls its tools there; `mesh rollout check` says what moving the mesh onto NATS takes",
                urls.join(",")
            );
        }
        let cfg = BusConfig {
            url: urls.join(","),
            principal: principal.clone(),
            credential: ClientCredential::NKey(Secret::new(kp.seed().context("reading the seed")?)),
            ca_file: None,
            inbox_prefix: Some(subjects::inbox_prefix(&principal)),
            pin: Some(CertPin::from_hex(&genesis.cert_sha256)?),
        };
        let (client, errors) = ServerErrors::connect(&cfg)
            .await
            .with_context(|| format!("connecting as person {person}"))?;
        let r = mesh_sdk::call(
            &Bus::Nats(NatsSide::new(client)),
            errors.refusal(Denied::Publish, &address.subject),
            &format!("person {person}"),
            &address,
            payload,
            args.timeout,
        )
        .await;
        match r {
            Err(e @ SdkError::NoServer { .. }) => {
                match not_in_catalogue(&args.mesh, &args.tool).await {
                    Some(why) => Err(anyhow::anyhow!(why)),
                    None => Err(e.into()),
                }
            }
            r => anyhow::Ok(r?),
        }
    })??;
    output::print(&format!("{}\n", serde_json::to_string_pretty(&answer)?))?;
    Ok(ExitCode::SUCCESS)
}

/// The person whose recorded key `public_key` is.
async fn person_of(mesh: &MeshArgs, public_key: &str) -> anyhow::Result<Name> {
    let store = open_existing_store(&mesh.store_url()?).await?;
    let keys = store.person_keys().await;
    store.close().await;
    match keys?.into_iter().find(|(_, k)| k == public_key) {
        Some((person, _)) => Ok(person),
        None => bail!(
            "no person is recorded with key {public_key}; record it with `mesh person add NAME --tools … --nkey {public_key}`, or name the person with --person"
        ),
    }
}

/// Why nothing serves `tool` when the registered catalogue already says
/// it: its module or seat declares no such tool, or is not registered.
/// None when the catalogue does declare it (then no instance serves it
/// right now) or cannot be read (the call's own error says enough).
async fn not_in_catalogue(mesh: &MeshArgs, tool: &str) -> Option<String> {
    let r = mesh_core::manifest::refs::parse_tool_ref(tool).ok()?;
    let store = open_existing_store(&mesh.store_url().ok()?).await.ok()?;
    let catalogue = mesh_state::registered::catalogue(&store).await;
    store.close().await;
    undeclared(&catalogue.ok()?, &r)
}

/// What the catalogue says against a call of `r`, if anything.
fn undeclared(catalogue: &Catalogue, r: &ToolRef) -> Option<String> {
    let (what, tools): (String, Vec<&str>) = match &r.provider {
        Target::Module(m) => match catalogue.module(m) {
            Some(manifest) => (
                format!("module {m} serves"),
                manifest.serves.iter().map(|t| t.value.as_str()).collect(),
            ),
            None => {
                let names = catalogue.manifests().iter().map(|m| m.name.value.as_str());
                return Some(unknown("module", m.as_str(), names));
            }
        },
        Target::Seat(s) => match catalogue.seat(s) {
            Some(seat) => (
                format!("seat {s} has"),
                seat.decl.tools.iter().map(|t| t.value.as_str()).collect(),
            ),
            None => {
                let names = catalogue.seats().map(|s| s.decl.name.value.as_str());
                return Some(unknown("seat", s.as_str(), names));
            }
        },
    };
    if tools.contains(&r.tool.as_str()) {
        return None;
    }
    let tool = r.tool.as_str();
    let rest = match (suggest(tool, tools.iter().copied()), tools.as_slice()) {
        (_, []) => "; it serves none".to_string(),
        (Some(close), _) => format!("; did you mean {close}? (it serves {})", tools.join(", ")),
        (None, all) => format!("; it serves {}", all.join(", ")),
    };
    Some(format!("{what} no tool \"{tool}\"{rest}"))
}

/// A provider the catalogue does not hold, with the closest it does.
fn unknown<'a>(what: &str, name: &str, names: impl Iterator<Item = &'a str>) -> String {
    let (missing, remedy) = match what {
        "seat" => ("declared", "`mesh seats` lists the seats"),
        _ => (
            "registered",
            "`mesh catalogue register DIR` registers its catalogue",
        ),
    };
    match suggest(name, names) {
        Some(close) => format!("no {what} \"{name}\" {missing}; did you mean {close}?"),
        None => format!("no {what} \"{name}\" {missing}; {remedy}"),
    }
}

#[cfg(test)]
mod tests {
    use mesh_core::catalogue::{Aliases, Catalogue};
    use mesh_core::manifest::{self, refs::parse_tool_ref};

    use super::undeclared;

    fn catalogue() -> Catalogue {
        let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/catalogue");
        let manifests = ["greeter", "git-server", "echo"]
            .iter()
            .map(|m| {
                let path = format!("{examples}/{m}/mesh.toml");
                manifest::parse(&path, &std::fs::read_to_string(&path).unwrap()).unwrap()
            })
            .collect();
        Catalogue::build(manifests, Aliases::new())
    }

    fn said(tool: &str) -> Option<String> {
        undeclared(&catalogue(), &parse_tool_ref(tool).unwrap())
    }

    #[test]
    fn a_tool_the_catalogue_lacks_is_named_with_what_is_there() {
        assert_eq!(said("greeter.greet"), None, "declared: nothing to add");
        assert_eq!(said("seat:git.clone"), None);
        assert_eq!(
            said("seat:git.clon").as_deref(),
            Some(
                "seat git has no tool \"clon\"; did you mean clone? (it serves clone, create-repo)"
            )
        );
        assert_eq!(
            said("seat:gitt.clone").as_deref(),
            Some("no seat \"gitt\" declared; did you mean git?")
        );
        assert_eq!(
            said("seat:zzzzzz.clone").as_deref(),
            Some("no seat \"zzzzzz\" declared; `mesh seats` lists the seats")
        );
        assert_eq!(
            said("nothing-like-it.x").as_deref(),
            Some(
                "no module \"nothing-like-it\" registered; `mesh catalogue register DIR` registers its catalogue"
            )
        );
    }
}
