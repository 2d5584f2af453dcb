//! `[run]`: what a host starts for the module — a process (`command`) or a
//! container (`image`, with `command` as the arguments to its entrypoint) —
//! and each run string's placeholders, checked where they sit.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::parser::{Parser, RUN};
use super::toml_access::get;
use super::{Driver, EnvVar, FileDecl, Located, Run, RunValue};
use crate::container::{self, pinned_by_digest};
use crate::diagnostic::{Kind, suggest};
use crate::placeholders::{self, Placeholder};

const DRIVERS: &[&str] = &["process", "container"];

impl Parser<'_> {
    fn driver(&mut self, t: &DeTable<'_>, header: &Range<usize>) -> Option<Located<Driver>> {
        let Some((_, v)) = get(t, "driver") else {
            return Some(Located::new(Driver::Process, self.toml.pos(header)));
        };
        let s = self.toml.string(v, "driver")?;
        let driver = match s {
            "process" => Driver::Process,
            "container" => Driver::Container,
            other => {
                let help = suggest(other, DRIVERS.iter().copied())
                    .map(|c| format!("did you mean `{c}`?"))
                    .unwrap_or_else(|| "write `process` or `container`".into());
                self.toml.push(
                    Kind::BadValue,
                    v.span(),
                    format!("unknown driver `{other}`"),
                    Some(help),
                );
                return None;
            }
        };
        Some(Located::new(driver, self.toml.pos(&v.span())))
    }

    /// `image`: required under the container driver, refused under any
    /// other (it would be ignored, and the module run as something else).
    /// An image the node pulls itself is pinned by digest: a tag can name
    /// other bytes tomorrow, on one node and not another.
    fn image(
        &mut self,
        t: &DeTable<'_>,
        header: &Range<usize>,
        container: bool,
        files: &[FileDecl],
    ) -> Option<Option<RunValue>> {
        let Some((_, v)) = get(t, "image") else {
            if container {
                self.toml.push(
                    Kind::MissingField,
                    header.clone(),
                    "[run] has `driver = \"container\"` but no `image`".into(),
                    Some("write `image = \"${artifact:NAME}\"` (an OCI archive put with `mesh artifact put`) or `image = \"name@sha256:HEX\"`".into()),
                );
                return None;
            }
            return Some(None);
        };
        if !container {
            self.toml.push(
                Kind::BadValue,
                v.span(),
                "`image` is read only under `driver = \"container\"`".into(),
                Some("add `driver = \"container\"` to [run], or remove `image`".into()),
            );
            return None;
        }
        let s = self.toml.string(v, "image")?.to_string();
        let value = self.run_value(&s, &v.span(), files, Context::Image)?;
        let from_artifact = value
            .placeholders
            .iter()
            .any(|p| matches!(p.value, Placeholder::Artifact { .. }));
        // The host loads an artifact image from its cached file, which is
        // the whole value: nothing may sit beside it.
        if from_artifact && value.artifact_alone().is_none() {
            self.toml.push(
                Kind::BadValue,
                v.span(),
                format!("image `{s}` is an artifact with something beside it"),
                Some("write the artifact alone: `image = \"${artifact:NAME}\"`".into()),
            );
            return None;
        }
        if !from_artifact && !pinned_by_digest(&s) {
            self.toml.push(
                Kind::BadValue,
                v.span(),
                format!("image `{s}` is not pinned by digest"),
                Some("write `name@sha256:HEX` (64 hex digits), or `${artifact:NAME}` for an OCI archive in the artifact store".into()),
            );
            return None;
        }
        Some(Some(value))
    }

    pub(super) fn run(
        &mut self,
        t: &DeTable<'_>,
        header: &Range<usize>,
        files: &[FileDecl],
    ) -> Option<Run> {
        self.check_fields(t, Some("[run]"), RUN);
        let secrets_in_environment = get(t, "secrets-in-environment").and_then(|(_, v)| {
            let s = self.toml.string(v, "secrets-in-environment")?;
            if s.trim().is_empty() {
                self.toml.push(
                    Kind::BadValue,
                    v.span(),
                    "`secrets-in-environment` is empty; it is the reason secrets may be in the environment".into(),
                    Some("say why this module cannot read the secret from a file".into()),
                );
                return None;
            }
            Some(Located::new(s.to_string(), self.toml.pos(&v.span())))
        });
        let driver = self.driver(t, header);
        let container = matches!(driver.as_ref().map(|d| &d.value), Some(Driver::Container));
        // Under the container driver `command` is optional: it is the
        // arguments given to the image's entrypoint (the image says what
        // runs). Under the process driver it is what runs.
        let command_value = if container {
            get(t, "command").map(|(_, v)| v)
        } else {
            self.toml.required(
                t,
                header,
                "[run]",
                "command",
                Some("write `command = [\"program\", \"arg\"]`".into()),
            )
        };
        let command = command_value.map(|v| {
            let items = self.toml.argv(v, "command");
            if items.is_empty() && matches!(v.get_ref(), DeValue::Array(_)) {
                let message = if container {
                    "`command` is empty; leave it out to run the image's own command"
                } else {
                    "`command` is empty; a host would have nothing to start"
                };
                self.toml
                    .push(Kind::BadValue, v.span(), message.into(), None);
            }
            items
                .iter()
                .filter_map(|(s, span)| self.run_value(s, span, files, Context::Command))
                .collect::<Vec<_>>()
        });
        let image = self.image(t, header, container, files);
        let mut env = Vec::new();
        let vars = get(t, "env").and_then(|(_, v)| {
            let help = Some("write `env = { NAME = \"value\" }`".into());
            self.toml.table(v, "env", help)
        });
        for (k, val) in vars.into_iter().flat_map(DeTable::iter) {
            let key: &str = k.get_ref();
            if !container::is_env_name(key) {
                self.toml.push(
                    Kind::BadValue,
                    k.span(),
                    format!("`{key}` is not an environment variable name"),
                    Some("use letters, digits and `_`, not starting with a digit".into()),
                );
                continue;
            }
            // The host hands a container's variables to the engine by name
            // through the engine's own environment.
            if container && container::configures_engine(key) {
                self.toml.push(
                    Kind::BadValue,
                    k.span(),
                    format!(
                        "`{key}` would configure the container engine (Podman reads it for itself), not reach the container"
                    ),
                    Some(format!(
                        "rename it (for example `APP_{key}`) and read that name in the image, or pass the value in a [[file]]"
                    )),
                );
                continue;
            }
            let Some(s) = self.toml.string(val, key) else {
                continue;
            };
            let s = s.to_string();
            let ctx = Context::Env {
                reason: secrets_in_environment.is_some(),
            };
            if let Some(value) = self.run_value(&s, &val.span(), files, ctx) {
                env.push(EnvVar {
                    name: Located::new(key.to_string(), self.toml.pos(&k.span())),
                    value,
                });
            }
        }
        let command = match command {
            Some(c) => c,
            None if container && command_value.is_none() => Vec::new(),
            None => return None,
        };
        Some(Run {
            command,
            image: image?,
            env,
            driver: driver?,
            secrets_in_environment,
            pos: self.toml.pos(header),
        })
    }

    /// Parses a `[run]` string's placeholders and checks each where it sits.
    pub(super) fn run_value(
        &mut self,
        s: &str,
        span: &Range<usize>,
        files: &[FileDecl],
        ctx: Context,
    ) -> Option<RunValue> {
        let template = match placeholders::parse(s) {
            Ok(t) => t,
            Err(errors) => {
                for e in errors {
                    let at = self.toml.inner(span, s, e.range);
                    self.toml.push(Kind::BadPlaceholder, at, e.message, e.help);
                }
                return None;
            }
        };
        let mut located = Vec::new();
        let mut ok = true;
        for (p, range) in template.placeholders() {
            let at = self.toml.inner(span, s, range.clone());
            match p {
                Placeholder::File { .. } if ctx == Context::File => {
                    ok = false;
                    self.toml.push(
                        Kind::UndeclaredFile,
                        at.clone(),
                        format!("`{p}` in a file's content: a file names no other file"),
                        Some("write the path itself, or pass it in [run] (`${file:NAME}`)".into()),
                    );
                }
                Placeholder::File { name } if !files.iter().any(|f| f.name.value == *name) => {
                    ok = false;
                    self.toml.push(
                        Kind::UndeclaredFile,
                        at.clone(),
                        format!("`{p}` names no [[file]] of this manifest"),
                        Some(format!(
                            "declare `[[file]]` with `name = \"{name}\"` and its path"
                        )),
                    );
                }
                Placeholder::Secret { .. } if ctx == Context::Command => {
                    ok = false;
                    // A command line is readable by every local user (ps, /proc).
                    self.toml.push(
                        Kind::SecretInCommand,
                        at.clone(),
                        format!("`{p}` on the command line is readable by every user of the node"),
                        Some("pass it in a [[file]] (`${file:NAME}`), or in `env` with `secrets-in-environment`".into()),
                    );
                }
                Placeholder::Secret { .. } if ctx == Context::Health => {
                    ok = false;
                    // A failing check's output goes into reports and records.
                    self.toml.push(
                        Kind::BadPlaceholder,
                        at.clone(),
                        format!("`{p}` in [health]: a failing check is quoted in reports"),
                        Some("check an endpoint that needs no secret, or run a script that reads it from a [[file]]".into()),
                    );
                }
                Placeholder::Secret { .. } if ctx == (Context::Env { reason: false }) => {
                    ok = false;
                    self.toml.push(
                        Kind::SecretInEnvironment,
                        at.clone(),
                        format!("`{p}` in `env` needs `secrets-in-environment = \"<reason>\"` in [run]"),
                        Some("an environment is inherited by children and shows in crash reports: prefer a [[file]], or state why not".into()),
                    );
                }
                // Filled by the host with the file it fetched and checked:
                // only what it starts reads it.
                Placeholder::Artifact { .. }
                    if !matches!(ctx, Context::Command | Context::Image) =>
                {
                    ok = false;
                    self.toml.push(
                        Kind::BadPlaceholder,
                        at.clone(),
                        format!("`{p}` is filled by the host in [run] `command` and `image` only"),
                        Some("name the artifact in `command` (the program or an argument) or in `image`".into()),
                    );
                }
                _ => {}
            }
            located.push(Located::new(p.clone(), self.toml.pos(&at)));
        }
        ok.then(|| RunValue {
            text: s.to_string(),
            template,
            pos: self.toml.pos(span),
            placeholders: located,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Context {
    Command,
    /// `[run] image`.
    Image,
    Env {
        reason: bool,
    },
    /// A `[[file]]`'s content: written 0600 for the module alone, so a
    /// secret belongs here.
    File,
    /// A `[health]` check's URL, address or argv.
    Health,
}

#[cfg(test)]
mod tests {
    use crate::diagnostic::{Diagnostic, Kind};
    use crate::manifest::{Driver, parse};

    const HEAD: &str = "[module]\nname = \"m\"\ndescription = \"d\"\n[run]\n";

    fn refused(run: &str) -> Diagnostic {
        let text = format!("{HEAD}{run}");
        let mut errs = parse("m.toml", &text).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        errs.remove(0)
    }

    #[test]
    fn a_container_takes_an_image_and_its_command_as_the_entrypoints_arguments() {
        let hex = "c".repeat(64);
        for (run, args) in [
            ("driver = \"container\"\nimage = \"${artifact:img}\"\n", 0),
            (
                "driver = \"container\"\nimage = \"${artifact:img}\"\ncommand = [\"--serve\"]\n",
                1,
            ),
            (
                &*format!("driver = \"container\"\nimage = \"docker.io/x/y@sha256:{hex}\"\n"),
                0,
            ),
        ] {
            let m = parse("m.toml", &format!("{HEAD}{run}")).unwrap();
            let r = m.run.unwrap();
            assert_eq!(r.driver.value, Driver::Container);
            assert!(r.image.is_some());
            assert_eq!(r.command.len(), args, "{run}");
        }
        let m = parse(
            "m.toml",
            &format!("{HEAD}command = [\"${{artifact:bin}}\", \"-v\"]\n"),
        )
        .unwrap();
        assert_eq!(m.run.unwrap().driver.value, Driver::Process);
    }

    #[test]
    fn image_and_driver_refusals_point_at_the_line_and_say_what_to_write() {
        // No image under the container driver.
        let d = refused("driver = \"container\"\ncommand = [\"x\"]\n");
        assert_eq!((d.kind, d.location.line), (Kind::MissingField, 4));
        assert!(d.message.contains("no `image`"), "{}", d.message);
        assert!(d.help.unwrap().contains("${artifact:NAME}"));
        // An image under the process driver would be ignored.
        let d = refused("command = [\"x\"]\nimage = \"${artifact:img}\"\n");
        assert_eq!((d.kind, d.location.line), (Kind::BadValue, 6));
        assert!(d.help.unwrap().contains("driver = \"container\""));
        // A tag names other bytes tomorrow.
        let d = refused("driver = \"container\"\nimage = \"alpine:3\"\n");
        assert_eq!((d.kind, d.location.line), (Kind::BadValue, 6));
        assert!(d.message.contains("not pinned by digest"), "{}", d.message);
        // A misspelt driver.
        let d = refused("driver = \"contaner\"\ncommand = [\"x\"]\n");
        assert_eq!(d.help.as_deref(), Some("did you mean `container`?"));
        // An empty command under the container driver: leave it out.
        let d = refused("driver = \"container\"\nimage = \"${artifact:i}\"\ncommand = []\n");
        assert!(d.message.contains("leave it out"), "{}", d.message);
        // Without a driver, a command is required as before.
        let d = refused("env = { A = \"1\" }\n");
        assert_eq!(d.kind, Kind::MissingField);
    }

    #[test]
    fn an_artifact_is_named_in_command_or_image_only() {
        let d = refused("command = [\"x\"]\nenv = { BIN = \"${artifact:bin}\" }\n");
        assert_eq!((d.kind, d.location.line), (Kind::BadPlaceholder, 6));
        assert_eq!(d.location.col, 16);
        assert!(d.message.contains("[run] `command` and `image` only"));
        let text = format!(
            "{HEAD}command = [\"x\"]\n[[file]]\nname = \"conf\"\npath = \"c\"\ncontent = \"${{artifact:bin}}\"\n"
        );
        let errs = parse("m.toml", &text).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].kind, Kind::BadPlaceholder);
        assert_eq!(errs[0].location.line, 9);
    }
}
