//! What the container engine (Podman) can take from a module's `[run]`,
//! decided here once: `mesh check` (the manifest parser) refuses what it
//! cannot take, the controller composes the decided form into the
//! declaration, and the host executes it without deciding again.

use crate::digest::is_sha256_hex;

/// `[A-Za-z_][A-Za-z0-9_]*`: anything else is no variable a program can
/// read, and on an engine's command line could carry `=value` (a value on
/// argv) or a glob (`--env 'A*'` passes every matching variable).
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Env names Podman reads for itself. The host passes a container module's
/// variables by name through the engine's own environment (a value on its
/// command line would be world-readable), so one of these would pick
/// another engine, configuration or storage rather than reach the
/// container.
pub fn configures_engine(name: &str) -> bool {
    name.starts_with("CONTAINERS_")
        || name.starts_with("CONTAINER_")
        || matches!(
            name,
            "STORAGE_DRIVER" | "STORAGE_OPTS" | "XDG_RUNTIME_DIR" | "XDG_CONFIG_HOME"
        )
}

/// `name@sha256:<64 lowercase hex>`, with a name the engine reads as an
/// image and never as an option: not empty, not starting with `-`, no
/// whitespace or second `@`. A tag can name other bytes tomorrow, on one
/// node and not another; a digest cannot.
pub fn pinned_by_digest(reference: &str) -> bool {
    reference
        .rsplit_once("@sha256:")
        .is_some_and(|(name, hex)| {
            !name.is_empty()
                && !name.starts_with('-')
                && !name.contains(|c: char| c.is_whitespace() || c == '@')
                && is_sha256_hex(hex)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_name_is_a_variable_name() {
        for ok in ["A", "_", "API_TOKEN", "a1", "_9"] {
            assert!(is_env_name(ok), "{ok}");
        }
        for bad in ["", "1X", "DATABASE-URL", "A=1", "A*", "A B", "É"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_engines_own_variables_are_named() {
        for engine in [
            "CONTAINERS_CONF",
            "CONTAINERS_STORAGE_CONF",
            "CONTAINER_HOST",
            "STORAGE_DRIVER",
            "STORAGE_OPTS",
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
        ] {
            assert!(configures_engine(engine), "{engine}");
        }
        for module in [
            "CONTAINERS",
            "APP_CONTAINERS_CONF",
            "STORAGE",
            "XDG_DATA_HOME",
            "PATH",
        ] {
            assert!(!configures_engine(module), "{module}");
        }
    }

    #[test]
    fn only_a_digest_after_a_plain_name_pins_an_image() {
        let hex = "0123456789abcdef".repeat(4);
        assert!(pinned_by_digest(&format!(
            "docker.io/library/x@sha256:{hex}"
        )));
        assert!(pinned_by_digest(&format!("x:1.2@sha256:{hex}")));
        assert!(!pinned_by_digest("x:latest"));
        assert!(!pinned_by_digest(&format!("x@sha256:{}", &hex[1..])));
        assert!(!pinned_by_digest(&format!(
            "x@sha256:{}",
            hex.to_uppercase()
        )));
        assert!(!pinned_by_digest(&format!("x@sha512:{hex}")));
        assert!(!pinned_by_digest(&format!("@sha256:{hex}")));
        assert!(!pinned_by_digest(&format!("--privileged@sha256:{hex}")));
        assert!(!pinned_by_digest(&format!("a b@sha256:{hex}")));
        assert!(!pinned_by_digest(&format!("a@b@sha256:{hex}")));
    }
}
