//! Meshes over several machines (network namespaces of the testkit, each
//! with its own address). Hosts enrol over real addresses, a seat's
//! address is its holder machine's and a module on another machine
//! connects to it; a host partitioned away keeps its modules and comes
//! back without enrolling again; a machine's power cut is seen as `down`
//! and converges when its host starts again. A clustered bus over three
//! machines loses its active side to a partition under 2,000 reports
//! (`machines_live/cluster.rs`). Needs root: without it the kit fails
//! saying so.

#[path = "machines_live/cluster.rs"]
mod cluster;
#[path = "machines_live/fleet.rs"]
mod fleet;
#[path = "join_live/harness.rs"]
mod harness;
#[path = "join_live/report_stream.rs"]
mod report_stream;

use std::path::Path;
use std::time::{Duration, Instant};

use fleet::{Fleet, wait_until};

/// How long a node may go unheard before `mesh nodes` says `down`
/// (12 missed heartbeats of 5 s), plus the controller's batched writes of
/// last seen and a margin.
const DOWN_WITHIN: Duration = Duration::from_secs(90);
const CONVERGE: Duration = Duration::from_secs(60);
/// How long the host stays partitioned away.
const PARTITION: Duration = Duration::from_secs(60);

/// The seat's holder: a listener answering each connection with a line.
const DB: &str = r#"import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5432))
s.listen()
print("db listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"db here\n")
    c.close()
"#;

/// The seat's user: connects to the address `${seat:db:5432}` gave it.
const APP: &str = r#"addr=${1%:*}; port=${1##*:}
until { exec 3<>"/dev/tcp/$addr/$port"; } 2>/dev/null; do sleep 0.2; done
read -r line <&3
echo "connected to $1: $line"
exec sleep 3600
"#;

fn catalogue(tmp: &Path) -> std::path::PathBuf {
    let root = tmp.join("catalogue");
    let scripts = tmp.join("scripts");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::write(scripts.join("db.py"), DB).unwrap();
    std::fs::write(scripts.join("app.sh"), APP).unwrap();
    let db = format!(
        "[module]\nname = \"db\"\ndescription = \"answers on its seat\"\n\n[run]\ncommand = [\"/usr/bin/python3\", \"{}\"]\n\n[[seat]]\nname = \"db\"\nscope = \"mesh\"\nprotocol = \"tcp\"\n\n[holds]\nseats = [\"db\"]\n",
        scripts.join("db.py").display()
    );
    let app = format!(
        "[module]\nname = \"app\"\ndescription = \"connects to the seat\"\n\n[run]\ncommand = [\"/bin/bash\", \"{}\", \"${{seat:db:5432}}\"]\n\n[uses]\nseats = [\"db\"]\n",
        scripts.join("app.sh").display()
    );
    for (name, text) in [("db", db), ("app", app)] {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("mesh.toml"), text).unwrap();
    }
    root
}

/// One row of the table printed at the end.
pub struct Row {
    what: String,
    took: Duration,
}

/// Both meshes at once, each on machines of its own; one table, one line.
#[test]
fn several_machines_ride_out_partitions_and_power_cuts_losing_no_report() {
    let started = Instant::now();
    let ((rows, faults), clustered) = std::thread::scope(|s| {
        let hosts = s.spawn(hosts_on_other_machines);
        let clustered = s.spawn(cluster::a_partition_isolating_the_active_side);
        // Both joined before either panic goes on: neither mesh outlives it.
        let (hosts, clustered) = (hosts.join(), clustered.join());
        let hosts = hosts.unwrap_or_else(|p| std::panic::resume_unwind(p));
        let clustered = clustered.unwrap_or_else(|p| std::panic::resume_unwind(p));
        (hosts, clustered)
    });
    println!("{:<100} {:>8}", "machines (network namespaces)", "took");
    for r in rows.iter().chain(&clustered.rows) {
        println!("{:<100} {:>7.1}s", r.what, r.took.as_secs_f64());
    }
    let lost = clustered.sent - clustered.recorded;
    println!(
        "machines: {} faults, {lost} reports lost, {} recorded twice ({} s in all)",
        faults + clustered.faults,
        clustered.twice,
        started.elapsed().as_secs()
    );
    assert_eq!((lost, clustered.twice), (0, 0));
}

/// Hosts on machines 1 and 2 of a mesh on machine 0: a seat across
/// machines, a partition, a power cut. The rows and the faults made.
fn hosts_on_other_machines() -> (Vec<Row>, usize) {
    let mut rows = Vec::new();
    let mut faults = 0;
    let started = Instant::now();
    let mut fleet = Fleet::new(3);
    let cat = catalogue(fleet.tmp.path());
    fleet.ok(&["catalogue", "register", cat.to_str().unwrap()]);
    fleet.enrol(1, "n1");
    fleet.enrol(2, "n2");
    rows.push(Row {
        what: "two hosts enrolled over 10.77.0.1".into(),
        took: started.elapsed(),
    });

    // The holder on machine 1, its user on machine 2.
    let t = Instant::now();
    let wait = ["--wait", "--timeout", "60s"];
    fleet.ok(&[&["assign", "db", "n1"][..], &wait].concat());
    fleet.ok(&[&["assign", "app", "n2"][..], &wait].concat());
    let holder = fleet.machine(1).addr.to_string();
    let connected = format!("connected to {holder}:5432: db here");
    assert!(
        wait_until(CONVERGE, || fleet
            .module_log("n2", "app")
            .contains(&connected)),
        "app on machine 2 never reached db on machine 1; its log:\n{}",
        fleet.module_log("n2", "app")
    );
    rows.push(Row {
        what: "${seat:db:5432} = machine 1's address, reached from machine 2".into(),
        took: t.elapsed(),
    });
    let db = fleet.module_pid("n1", "db").expect("db runs");
    let app = fleet.module_pid("n2", "app").expect("app runs");
    let host1 = fleet.hosts[1].as_ref().unwrap().pid();

    // Two faults at once: machine 1 cut off from the broker's machine,
    // machine 2's power cut.
    let t = Instant::now();
    fleet.kit.partition(&[1], &[0]).unwrap();
    fleet.machine(2).power_cut();
    faults += 2;
    assert!(
        fleet.hosts[2].as_mut().unwrap().exited(),
        "the power cut left its host"
    );
    // Killed with its host, it is reaped by whoever inherited it.
    assert!(
        wait_until(Duration::from_secs(5), || !mesh_testkit::pid_alive(app)),
        "the power cut left app running"
    );
    assert!(
        wait_until(DOWN_WITHIN, || fleet.liveness("n2") == "down"),
        "n2 is {} {:?} after its power cut",
        fleet.liveness("n2"),
        t.elapsed()
    );
    rows.push(Row {
        what: "machine 2's power cut: n2 down in mesh nodes".into(),
        took: t.elapsed(),
    });
    // The partition holds: machine 1's heartbeats do not reach the
    // controller.
    let n1 = fleet.liveness("n1");
    assert!(n1 == "stale" || n1 == "down", "n1 is {n1} while cut off");
    let cut_off = t.elapsed();
    if cut_off < PARTITION {
        std::thread::sleep(PARTITION - cut_off);
    }
    // Partitioned away, the host kept its modules as they were.
    assert_eq!(fleet.module_pid("n1", "db"), Some(db), "db was restarted");
    assert!(
        mesh_testkit::pid_alive(host1),
        "the host on machine 1 ended"
    );
    let heard = fleet.hosts[1].as_ref().unwrap().log();
    fleet.kit.heal().unwrap();
    let t = Instant::now();
    assert!(
        wait_until(CONVERGE, || fleet.liveness("n1") == "ready"),
        "n1 is {} after the partition healed; its log:\n{}",
        fleet.liveness("n1"),
        fleet.hosts[1].as_ref().unwrap().log()
    );
    let host_log = fleet.hosts[1].as_ref().unwrap().log();
    assert_eq!(
        host_log.matches("enrolled node=n1").count(),
        1,
        "enrolled again:\n{host_log}"
    );
    assert_eq!(fleet.module_pid("n1", "db"), Some(db));
    // It takes declarations and reports again: a second module there,
    // answered as running (its connection, unanswered for three pings,
    // was dropped during the partition and made again after).
    fleet.ok(&[&["assign", "app", "n1"][..], &wait].concat());
    assert!(
        wait_until(CONVERGE, || fleet
            .module_log("n1", "app")
            .contains(&connected)),
        "app on machine 1 never reached db; host:\n{}",
        &fleet.hosts[1].as_ref().unwrap().log()[heard.len()..]
    );
    rows.push(Row {
        what:
            "machine 1 partitioned 60 s: db kept, n1 ready, declared and reporting, not re-enrolled"
                .into(),
        took: t.elapsed(),
    });

    // Machine 2's host starts again (its state survived): app runs again
    // and reaches db.
    let t = Instant::now();
    let before = fleet.module_log("n2", "app").matches(&connected).count();
    fleet.start_host(2, "n2", None);
    assert!(
        wait_until(CONVERGE, || {
            fleet.module_pid("n2", "app").is_some_and(|p| p != app)
                && fleet.module_log("n2", "app").matches(&connected).count() > before
        }),
        "app did not run again on machine 2; host:\n{}",
        fleet.hosts[2].as_ref().unwrap().log()
    );
    assert!(
        wait_until(CONVERGE, || fleet.liveness("n2") == "ready"),
        "n2 is {}",
        fleet.liveness("n2")
    );
    rows.push(Row {
        what: "machine 2 powered on: n2 ready, app running and connected again".into(),
        took: t.elapsed(),
    });

    (rows, faults)
}
