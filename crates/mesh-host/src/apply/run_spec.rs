//! What the driver is asked to run for a declared module: its command or
//! image with placeholders filled from the node's files and artifacts.

use super::*;

impl Applier {
    pub(super) fn run_spec(
        &self,
        m: &ModuleDecl,
        sealed_by: Option<&str>,
        artifacts: &BTreeMap<Name, PathBuf>,
        sequence: u64,
    ) -> Result<RunSpec, StartError> {
        let (key_file, _) = self.module_key(&m.name, m.key.as_deref())?;
        let principal = PrincipalKind::Module {
            node: self.state.node.clone(),
            module: m.name.clone(),
        }
        .principal_name();
        let container = m.run.driver == RunDriver::Container;
        let mut env: BTreeMap<String, String> = m.run.env.clone();
        let mut secrets = BTreeMap::new();
        for (k, sealed) in &m.run.sealed_env {
            let value = self
                .open(sealed_by, sealed)
                .map_err(|why| StartError::Sealed {
                    variable: k.clone(),
                    why,
                })?;
            secrets.insert(k.clone(), value);
        }
        // A container's secrets never reach the engine (not even the
        // client's environment): they go through a file (see `shim`).
        if !container {
            env.extend(
                secrets
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_string())),
            );
        }
        // What the container is given: the declared names and MESH_*, never
        // the host's PATH (the image has its own).
        let mut env_names: Vec<String> = env.keys().cloned().collect();
        if !env.contains_key("PATH")
            && let Ok(path) = std::env::var("PATH")
        {
            env.insert("PATH".into(), path);
        }
        let host_key_file = key_file.clone();
        let key_file = if container {
            PathBuf::from(CONTAINER_KEY_FILE)
        } else {
            key_file
        };
        for (k, v) in [
            ("MESH_BUS_URLS", self.bus_urls().join(",")),
            ("MESH_BUS_PIN", self.state.cert_sha256.clone()),
            ("MESH_NKEY_FILE", key_file.display().to_string()),
            ("MESH_INBOX_PREFIX", subjects::inbox_prefix(&principal)),
            ("MESH_NODE", self.state.node.to_string()),
            ("MESH_MODULE", m.name.to_string()),
        ] {
            env.insert(k.into(), v);
            env_names.push(k.into());
        }
        let work = self.work_dir(&m.name);
        make_dirs(&work)?;
        let ready = match container {
            true => format!("{CONTAINER_WORKDIR}/{}", crate::driver::READY_FILE),
            false => work.join(crate::driver::READY_FILE).display().to_string(),
        };
        env.insert("MESH_READY_FILE".into(), ready);
        env_names.push("MESH_READY_FILE".into());
        // With artifacts named, the command is a template of them.
        let fill = |value: &str| {
            if m.artifacts.is_empty() {
                Ok(value.to_string())
            } else {
                crate::artifacts::fill(value, artifacts).map_err(StartError::Artifact)
            }
        };
        let command = m
            .run
            .command
            .iter()
            .map(|a| fill(a))
            .collect::<Result<Vec<_>, _>>()?;
        let stop_grace = Duration::from_secs(m.run.stop_grace_s);
        let container = if container {
            let engine = container::require_engine().map_err(StartError::Container)?;
            let declared = m.run.image.as_ref().ok_or(StartError::NoImage)?;
            let image = container::image(declared, artifacts).map_err(StartError::Container)?;
            // Written before the first container: a host killed after it
            // knows at its next start to look for leftovers.
            write_private(&self.state.dir.join(CONTAINERS_MARKER), b"")?;
            let mut mounts = vec![(host_key_file, CONTAINER_KEY_FILE.to_string())];
            // Declared files where a process module finds them: relative
            // to its working directory.
            for f in &m.files {
                mounts.push((
                    work.join(&f.path),
                    format!("{CONTAINER_WORKDIR}/{}", f.path),
                ));
            }
            env_names.sort();
            env_names.dedup();
            let secret_env =
                crate::secrets::container_env(&self.state.dir, &self.module_dir(&m.name), &secrets)
                    .map_err(StartError::Container)?;
            Some(ContainerRun {
                engine,
                spec: ContainerSpec {
                    node: self.state.node.clone(),
                    module: m.name.clone(),
                    host: HostKeys::load(&self.state.dir)?.host_key().to_string(),
                    sequence,
                    image,
                    args: command.clone(),
                    env_names,
                    mounts,
                    workdir: Some((work.clone(), CONTAINER_WORKDIR.into())),
                    stop_grace,
                    ulimits: Ulimits::of_host(),
                    secret_env,
                },
            })
        } else {
            None
        };
        Ok(RunSpec {
            module: m.name.clone(),
            command,
            env,
            stop_grace,
            workdir: work,
            container,
        })
    }
}
