//! `mesh artifact put` from a person's machine: the file's bytes published
//! in order to the person's own upload subject in `UPLOADS` (each chunk
//! stored before the next few are sent), then the controller asked to put
//! them in the artifact store, checked against the size and digest
//! computed here.

use std::io::Read as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use mesh_core::names::Name;
use mesh_core::operation::Operation;
use mesh_core::operation::wire::{ArtifactPutArgs, Reply};

use crate::context::Context;
use crate::remote::Asker;

/// Chunks published before the oldest's acknowledgement is awaited.
const IN_FLIGHT: usize = 8;
/// How long one chunk's acknowledgement may take.
const STORED_WITHIN: Duration = Duration::from_secs(30);

pub async fn put(
    ctx: Context,
    module: &Name,
    name: &Name,
    file: &Path,
    version: Option<&str>,
) -> anyhow::Result<String> {
    let (size, sha256) = mesh_controller::artifacts::digest_file(file)?;
    let asker = Asker::connect(ctx).await?;
    let upload = hex::encode(rand::random::<[u8; 16]>());
    let subject = mesh_core::subjects::upload(&asker.person()?, &upload);
    let js = async_nats::jetstream::new(asker.client().clone());
    let mut refused = asker.refusals().watch();
    let sent = async {
        let mut f =
            std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
        let mut buf = vec![0u8; mesh_bus::artifacts::CHUNK_SIZE];
        let mut acks = std::collections::VecDeque::new();
        loop {
            let n = read_full(&mut f, &mut buf)
                .with_context(|| format!("reading {}", file.display()))?;
            if n > 0 {
                let ack = js
                    .publish(subject.clone(), buf[..n].to_vec().into())
                    .await
                    .with_context(|| format!("sending {}", file.display()))?;
                acks.push_back(ack);
            }
            while acks.len() > IN_FLIGHT || (n == 0 && !acks.is_empty()) {
                let Some(ack) = acks.pop_front() else { break };
                tokio::time::timeout(STORED_WITHIN, ack)
                    .await
                    .map_err(|_| {
                        anyhow::anyhow!("a chunk was not stored within {STORED_WITHIN:?}")
                    })?
                    .context("storing a chunk in UPLOADS")?;
            }
            if n == 0 {
                return anyhow::Ok(());
            }
        }
    };
    tokio::select! {
        r = sent => r?,
        _ = refused.refused(|r| r.subject == subject) => {
            return Err(asker.refused(&subject, Operation::ArtifactPut));
        }
    }
    let request = ArtifactPutArgs {
        module: module.clone(),
        name: name.clone(),
        version: version.map(str::to_string),
        upload,
        size,
        sha256,
    };
    match asker
        .ask(Operation::ArtifactPut, serde_json::to_value(&request)?)
        .await?
    {
        Reply::Done { said, .. } => Ok(said),
        Reply::Refused { reason } => bail!("refused: {reason}"),
    }
}

/// Fills `buf` from `f` as far as the file goes: 0 at its end.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}
