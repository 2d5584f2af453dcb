//! The machines kit against the kernel: addresses that reach each other and
//! nothing else, partitions both ways, a power cut, and nothing left behind
//! by a test that panics or a process killed outright.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mesh_testkit::{Machine, Machines};

/// One case at a time: a kit made by one case removes the leftovers
/// another case is looking at.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether a TCP connection from `from` to `addr:port` is made within 2 s
/// (bash's /dev/tcp: no client to install).
fn connects(from: &Machine, addr: &str, port: u16) -> bool {
    from.command("timeout")
        .args([
            "2",
            "bash",
            "-c",
            &format!("exec 3<>/dev/tcp/{addr}/{port}"),
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A nats-server listening on `m`'s address (any server would do; this one
/// the suite already installs).
fn listen(m: &Machine, port: u16) -> Child {
    let child = m
        .command(mesh_testkit::nats_server_binary().unwrap())
        .args(["-a", &m.addr.to_string(), "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !connects(m, &m.addr.to_string(), port) {
        assert!(
            Instant::now() < deadline,
            "the server in {} never listened",
            m.netns
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn links() -> String {
    let out = Command::new("ip").args(["-o", "link"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn machines_reach_each_other_a_partition_cuts_both_ways_and_a_power_cut_kills_all() {
    let _serial = serial();
    let kit = Machines::new(3).unwrap();
    let (m0, m1, m2) = (kit.machine(0), kit.machine(1), kit.machine(2));
    assert_eq!(m0.addr.to_string(), "10.77.0.1");
    assert_eq!(m2.addr.to_string(), "10.77.0.3");
    let mut server = listen(m0, 4222);
    let a0 = m0.addr.to_string();
    assert!(connects(m1, &a0, 4222) && connects(m2, &a0, 4222));
    // The bridge has no address: the machine running the tests has no
    // route of the kit's (what its own network does with 10.77.0.0/24 is
    // not the kit's to say).
    let bridge = Command::new("ip")
        .args(["-o", "addr", "show", "dev", kit.bridge()])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&bridge.stdout).contains("inet "));

    kit.partition(&[0], &[1]).unwrap();
    assert!(!connects(m1, &a0, 4222), "1 → 0 crossed the partition");
    assert!(connects(m2, &a0, 4222), "2 is on neither side");
    // The other way too: 0 cannot reach a server on 1.
    let mut other = m1
        .command(mesh_testkit::nats_server_binary().unwrap())
        .args(["-a", &m1.addr.to_string(), "-p", "4223"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let a1 = m1.addr.to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !connects(m2, &a1, 4223) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!connects(m0, &a1, 4223), "0 → 1 crossed the partition");

    kit.heal().unwrap();
    assert!(connects(m1, &a0, 4222) && connects(m0, &a1, 4223));

    let pid = server.id() as i32;
    assert!(m0.pids().contains(&pid), "{:?} lacks {pid}", m0.pids());
    m0.power_cut();
    assert!(m0.pids().is_empty());
    assert!(
        server.wait().unwrap().code().is_none(),
        "killed by a signal"
    );
    assert!(!connects(m1, &a0, 4222));
    drop(kit);
    let deadline = Instant::now() + Duration::from_secs(10);
    let ended = loop {
        match other.try_wait().unwrap() {
            Some(status) => break status,
            None if Instant::now() > deadline => {
                panic!("the kit's drop left a process of it running")
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(ended.code().is_none(), "the kit's drop killed it: {ended}");
}

/// A test's own code inside a machine: a listener bound to the machine's
/// address is reached from another machine, and a process started there
/// is the machine's (its power cut ends it).
#[test]
fn code_within_a_machine_has_its_network() {
    let _serial = serial();
    let kit = Machines::new(2).unwrap();
    let (m0, m1) = (kit.machine(0), kit.machine(1));
    let a0 = m0.addr.to_string();
    // Not bindable outside: the address is the namespace's alone.
    assert!(std::net::TcpListener::bind((m0.addr, 4300)).is_err());
    let listener = m0
        .within(|| std::net::TcpListener::bind((m0.addr, 4300)))
        .unwrap()
        .expect("bound inside machine 0");
    assert!(connects(m1, &a0, 4300), "machine 1 reaches it");
    drop(listener);
    let mut child = m0
        .within(|| Command::new("sleep").arg("60").spawn())
        .unwrap()
        .unwrap();
    assert!(m0.pids().contains(&(child.id() as i32)), "{:?}", m0.pids());
    m0.power_cut();
    assert!(child.wait().unwrap().code().is_none(), "killed by a signal");
}

/// Run by [`a_test_that_panics_leaves_nothing_behind`] in a process of its
/// own: machines with a process in one, then a panic.
#[test]
#[ignore = "run by another test"]
#[allow(clippy::zombie_processes)]
fn panics_holding_machines() {
    if std::env::var_os("MESH_KIT_INNER").is_none() {
        return;
    }
    let kit = Machines::new(2).unwrap();
    let child = kit
        .machine(1)
        .command("sleep")
        .arg("600")
        // Not the test's output: its reader waits for every writer.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    println!(
        "made {} {} {} pid {}",
        kit.machine(0).netns,
        kit.machine(1).netns,
        kit.bridge(),
        child.id()
    );
    if std::env::var_os("MESH_KIT_HANG").is_some() {
        std::thread::sleep(Duration::from_secs(600));
    }
    // The kit's drop, as the panic unwinds, is what ends it.
    let _unwaited = child;
    panic!("a test failing with machines made");
}

/// What the inner test made: two namespaces, the bridge, a pid.
fn made(out: &str) -> (Vec<String>, i32) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("made "))
        .unwrap_or_else(|| panic!("the inner test said nothing:\n{out}"));
    let words: Vec<String> = line.split_whitespace().map(String::from).collect();
    (words[..3].to_vec(), words[4].parse().unwrap())
}

fn inner() -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--ignored",
        "--exact",
        "panics_holding_machines",
        "--nocapture",
    ])
    .env("MESH_KIT_INNER", "1");
    c
}

fn assert_gone(names: &[String], pid: i32) {
    let (ns, links) = (netns_list(), links());
    for n in names {
        assert!(!ns.contains(n.as_str()), "{n} is left:\n{ns}");
        assert!(!links.contains(n.as_str()), "{n} is left:\n{links}");
    }
    // Killed, it is reaped by whoever inherited it: a moment later.
    let deadline = Instant::now() + Duration::from_secs(5);
    while mesh_testkit::pid_alive(pid as u32) && !zombie(pid) {
        assert!(
            Instant::now() < deadline,
            "the machine's process {pid} is left"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Dead, not yet reaped.
fn zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

#[test]
fn a_test_that_panics_leaves_nothing_behind() {
    let _serial = serial();
    let out = inner().output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the inner test passed:\n{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("a test failing with machines made")
            || stdout.contains("a test failing with machines made"),
        "it failed for another reason:\n{stdout}"
    );
    let (names, pid) = made(&stdout);
    assert_gone(&names, pid);
}

#[test]
fn machines_of_a_process_killed_outright_go_with_the_next_kit() {
    let _serial = serial();
    let mut child = inner()
        .env("MESH_KIT_HANG", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.contains(" pid ") || !seen.ends_with('\n') {
        assert!(Instant::now() < deadline, "nothing made:\n{seen}");
        let mut buf = [0u8; 512];
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        assert!(n > 0, "the inner test ended:\n{seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let (names, pid) = made(&seen);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(netns_list().contains(names[0].as_str()), "dropped anyway?");
    let _next = Machines::new(1).unwrap();
    assert_gone(&names, pid);
}
