//! How long a module's secrets rest on this host: as long as the module is
//! declared here. Its secret files (a `[[file]]` whose content holds a
//! secret, 0600 in its working directory) and a container's secret
//! variables (0600 beside its key, see `driver::container::shim`) are
//! removed when the module is unassigned; nothing of them goes to the
//! container engine, whose state outlives every container.

use std::collections::BTreeMap;
use std::path::Path;

use mesh_core::declaration::{FileBody, ModuleDecl};
use mesh_core::secret::Secret;

use crate::driver::container::shim::{self, SECRET_ENV_FILE};
use crate::driver::container::{ContainerError, SecretEnv};

/// A container module's secret variables written into its file, with the
/// shim installed to read them; `None` (and no file left) when it has none.
pub fn container_env(
    state_dir: &Path,
    module_dir: &Path,
    secrets: &BTreeMap<String, Secret>,
) -> Result<Option<SecretEnv>, ContainerError> {
    let file = module_dir.join(SECRET_ENV_FILE);
    if secrets.is_empty() {
        remove(&file);
        return Ok(None);
    }
    let shim = shim::install(state_dir)?;
    mesh_files::write_private(&file, &shim::file_bytes(secrets)).map_err(|e| {
        ContainerError::Shim {
            path: e.path,
            source: e.source,
        }
    })?;
    Ok(Some(SecretEnv {
        shim,
        file,
        image: Default::default(),
    }))
}

/// Removes what of its secrets a module `was` declared with left here.
pub fn forget(module_dir: &Path, was: &ModuleDecl) {
    remove(&module_dir.join(SECRET_ENV_FILE));
    let work = module_dir.join("work");
    for f in &was.files {
        if matches!(f.body, FileBody::Sealed(_)) {
            remove(&work.join(&f.path));
        }
    }
}

fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(path = %path.display(), reason = %e, "removing a secret the module no longer needs")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::declaration::FileDecl;
    use mesh_core::names::Name;

    fn decl(files: Vec<FileDecl>) -> ModuleDecl {
        serde_json::from_value(serde_json::json!({
            "name": "web", "version": "v1",
            "run": {"command": ["web"], "env": {}, "stop_grace_s": 5},
            "files": [], "artifacts": []
        }))
        .map(|m: ModuleDecl| ModuleDecl { files, ..m })
        .unwrap()
    }

    #[test]
    fn an_unassigned_module_leaves_no_secret_behind() {
        let dir = tempfile::tempdir().unwrap();
        let module = dir.path().join("modules/web");
        std::fs::create_dir_all(module.join("work/conf")).unwrap();
        let file = |name: &str, path: &str, body: FileBody| FileDecl {
            name: Name::new(name).unwrap(),
            path: path.into(),
            body,
        };
        let was = decl(vec![
            file("token", "conf/token", FileBody::Sealed("c2VhbGVk".into())),
            file("plain", "conf/plain", FileBody::Content("x".into())),
        ]);
        for path in ["work/conf/token", "work/conf/plain"] {
            std::fs::write(module.join(path), "v").unwrap();
        }
        let secrets = BTreeMap::from([("API_TOKEN".to_string(), Secret::new("s3cr3t"))]);
        let env = container_env(dir.path(), &module, &secrets)
            .unwrap()
            .unwrap();
        assert_eq!(std::fs::read(&env.file).unwrap(), b"API_TOKEN=s3cr3t\0");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&env.file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        forget(&module, &was);
        assert!(!env.file.exists());
        assert!(!module.join("work/conf/token").exists());
        // What held no secret is the module's own, and stays.
        assert!(module.join("work/conf/plain").exists());
        // No secret variable any more: no file is left either.
        container_env(dir.path(), &module, &secrets).unwrap();
        assert!(
            container_env(dir.path(), &module, &BTreeMap::new())
                .unwrap()
                .is_none()
        );
        assert!(!env.file.exists());
    }
}
