//! Machines for the tests where more than one is the point: each a network
//! namespace of its own, joined to the others by a bridge of the kit's own,
//! with its own address in a private /24 that exists inside these
//! namespaces only (the bridge has none: nothing of the kit is reachable
//! from the machine running the tests, nor reaches out of it).
//!
//! A process started in a machine lives in its namespace and is killed
//! with it. Faults: a partition between sets of machines (nftables, in
//! each machine's own ruleset, both directions), healing it, and a power
//! cut (every process of a machine SIGKILLed at once). Dropping the kit —
//! a test that panics included — kills every process of every machine and
//! removes the namespaces, their veths and the bridge; a kit left by a
//! process killed outright is removed by the next kit made.
//!
//! Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): without, [`Machines::new`]
//! fails saying so; it never skips.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Namespaces this kit made start with this (the pid of the process that
/// made them follows: how a leftover is known to be one).
const PREFIX: &str = "meshm-";

/// The machines' subnet: 10.77.0.0/24, machine `i` at 10.77.0.(i + 1).
const SUBNET: [u8; 3] = [10, 77, 0];

/// Why the machines could not be made or changed.
#[derive(Debug, thiserror::Error)]
pub enum MachinesError {
    #[error(
        "machines need root (network namespaces, veths, a bridge, nftables): run the suite as root (CI does); this test does not skip"
    )]
    NotRoot,
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("`{command}` could not run")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("machine {0} does not exist (the kit has {1})")]
    NoMachine(usize, usize),
    #[error("could not enter machine {netns}'s network namespace")]
    Enter {
        netns: String,
        #[source]
        source: std::io::Error,
    },
}

/// One machine: a network namespace with one interface on the kit's bridge.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The namespace's name (`ip netns`).
    pub netns: String,
    /// Its address on the bridge.
    pub addr: Ipv4Addr,
    /// Its interface in the root namespace (the veth's bridge end).
    veth: String,
}

impl Machine {
    /// A command run inside this machine (`ip netns exec`, which execs the
    /// program: the child's pid is the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns]).arg(program);
        c
    }

    /// The same as a tokio command.
    pub fn tokio_command(&self, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("ip");
        c.args(["netns", "exec", &self.netns]).arg(program);
        c
    }

    /// `f` run on a thread of its own inside this machine's network: the
    /// sockets it opens and the processes it starts are the machine's (a
    /// namespace is a thread's, and a child inherits its parent thread's).
    /// How a test speaks to a server reachable only inside the machines —
    /// a store it counts in, a bus it publishes to — with its own clients.
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, MachinesError> {
        let path = format!("/var/run/netns/{}", self.netns);
        let enter = |source| MachinesError::Enter {
            netns: self.netns.clone(),
            source,
        };
        let ns = std::fs::File::open(&path).map_err(enter)?;
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    use std::os::fd::AsRawFd as _;
                    // SAFETY: setns(2) on a descriptor this frame owns; it
                    // changes this thread's namespace only.
                    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(enter(std::io::Error::last_os_error()));
                    }
                    Ok(f())
                })
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Every process living in this machine.
    pub fn pids(&self) -> Vec<i32> {
        let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.netns])
            .output()
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Every process of this machine SIGKILLed at once, until none is
    /// left (one may be forking as it is killed).
    pub fn power_cut(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() > deadline {
                return;
            }
            for pid in pids {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// N machines on a bridge of their own, removed on drop.
#[derive(Debug)]
pub struct Machines {
    bridge: String,
    machines: Vec<Machine>,
}

impl Machines {
    /// `n` machines (at most 250), each up with its address and loopback.
    pub fn new(n: usize) -> Result<Machines, MachinesError> {
        assert!((1..=250).contains(&n), "1 to 250 machines");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(MachinesError::NotRoot);
        }
        remove_leftovers();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Interface names have 15 characters at most.
        let tag = format!("{pid:x}s{seq}");
        let mut kit = Machines {
            bridge: format!("mb{tag}"),
            machines: Vec::new(),
        };
        run("ip", &["link", "add", &kit.bridge, "type", "bridge"])?;
        run("ip", &["link", "set", &kit.bridge, "up"])?;
        for i in 0..n {
            let m = Machine {
                netns: format!("{PREFIX}{pid}-{seq}-{i}"),
                addr: Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], (i + 1) as u8),
                veth: format!("mv{tag}m{i}"),
            };
            // Pushed first: a failure below still removes what was made.
            kit.machines.push(m.clone());
            let inside = format!("mi{tag}m{i}");
            run("ip", &["netns", "add", &m.netns])?;
            run(
                "ip",
                &[
                    "link", "add", &m.veth, "type", "veth", "peer", "name", &inside, "netns",
                    &m.netns,
                ],
            )?;
            run("ip", &["link", "set", &m.veth, "master", &kit.bridge])?;
            run("ip", &["link", "set", &m.veth, "up"])?;
            let ns = ["-n", m.netns.as_str()];
            run("ip", &[&ns[..], &["link", "set", "lo", "up"]].concat())?;
            run(
                "ip",
                &[&ns[..], &["link", "set", &inside, "name", "eth0"]].concat(),
            )?;
            let cidr = format!("{}/24", m.addr);
            run(
                "ip",
                &[&ns[..], &["addr", "add", &cidr, "dev", "eth0"]].concat(),
            )?;
            run("ip", &[&ns[..], &["link", "set", "eth0", "up"]].concat())?;
        }
        Ok(kit)
    }

    pub fn machine(&self, i: usize) -> &Machine {
        self.get(i).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn get(&self, i: usize) -> Result<&Machine, MachinesError> {
        self.machines
            .get(i)
            .ok_or(MachinesError::NoMachine(i, self.machines.len()))
    }

    pub fn len(&self) -> usize {
        self.machines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.machines.is_empty()
    }

    /// The bridge's name (root namespace).
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// No packet between a machine of `a` and one of `b`, either way,
    /// until [`Machines::heal`]. Each machine drops in its own ruleset
    /// (input and output), so the rules go with its namespace.
    pub fn partition(&self, a: &[usize], b: &[usize]) -> Result<(), MachinesError> {
        for (side, other) in [(a, b), (b, a)] {
            let others: Vec<String> = other
                .iter()
                .map(|&j| self.get(j).map(|m| m.addr.to_string()))
                .collect::<Result<_, _>>()?;
            let set = others.join(", ");
            for &i in side {
                let m = self.get(i)?;
                let rules = format!(
                    "table inet meshpart {{\n\
                     \tchain input {{ type filter hook input priority -10; policy accept; ip saddr {{ {set} }} drop; }}\n\
                     \tchain output {{ type filter hook output priority -10; policy accept; ip daddr {{ {set} }} drop; }}\n\
                     }}\n"
                );
                nft(m, &rules)?;
            }
        }
        Ok(())
    }

    /// Every partition gone.
    pub fn heal(&self) -> Result<(), MachinesError> {
        for m in &self.machines {
            // Deleting an absent table fails; the set of rules is then
            // already empty.
            let _ = run(
                "ip",
                &[
                    "netns", "exec", &m.netns, "nft", "delete", "table", "inet", "meshpart",
                ],
            );
            let left = run("ip", &["netns", "exec", &m.netns, "nft", "list", "ruleset"])?;
            if left.contains("meshpart") {
                return Err(MachinesError::Command {
                    command: format!("nft delete table inet meshpart in {}", m.netns),
                    stderr: left,
                });
            }
        }
        Ok(())
    }

    fn remove(&mut self) {
        for m in &self.machines {
            m.power_cut();
        }
        for m in &self.machines {
            // The veth goes with its namespace; deleted first anyway, in
            // case a process held the namespace open.
            let _ = run("ip", &["link", "del", &m.veth]);
            let _ = run("ip", &["netns", "del", &m.netns]);
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
        self.machines.clear();
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Loads `rules` into machine `m`'s nftables (replacing the kit's table).
fn nft(m: &Machine, rules: &str) -> Result<(), MachinesError> {
    let _ = run(
        "ip",
        &[
            "netns", "exec", &m.netns, "nft", "delete", "table", "inet", "meshpart",
        ],
    );
    let command = format!("ip netns exec {} nft -f -", m.netns);
    let mut child = Command::new("ip")
        .args(["netns", "exec", &m.netns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| MachinesError::Spawn {
            command: command.clone(),
            source,
        })?;
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(rules.as_bytes())
            .map_err(|source| MachinesError::Spawn {
                command: command.clone(),
                source,
            })?;
    }
    let out = child
        .wait_with_output()
        .map_err(|source| MachinesError::Spawn {
            command: command.clone(),
            source,
        })?;
    checked(command, out).map(|_| ())
}

/// Namespaces (with their processes) and bridges of kits whose process is
/// gone: killed outright, it never dropped them.
fn remove_leftovers() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if crate::pid_alive(pid) {
            continue;
        }
        let m = Machine {
            netns: name.clone(),
            addr: Ipv4Addr::UNSPECIFIED,
            veth: String::new(),
        };
        m.power_cut();
        let _ = run("ip", &["netns", "del", &name]);
    }
    // Bridges: `mb<pid hex>s<seq>`.
    let Ok(links) = std::fs::read_dir("/sys/class/net") else {
        return;
    };
    for l in links.flatten() {
        let name = l.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("mb")
            .and_then(|rest| rest.split('s').next())
            .and_then(|p| u32::from_str_radix(p, 16).ok())
        else {
            continue;
        };
        if Path::new("/sys/class/net")
            .join(&name)
            .join("bridge")
            .exists()
            && !crate::pid_alive(pid)
        {
            let _ = run("ip", &["link", "del", &name]);
        }
    }
}

fn run(program: &str, args: &[&str]) -> Result<String, MachinesError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| MachinesError::Spawn {
            command: command.clone(),
            source,
        })?;
    checked(command, out)
}

fn checked(command: String, out: Output) -> Result<String, MachinesError> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(MachinesError::Command {
            command,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}
