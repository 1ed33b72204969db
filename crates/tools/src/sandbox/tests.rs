//! The sandbox through the real `bash` tool: what a command can reach on the network
//! and in the file system once the server passes its services and secret files (issue
//! 35, points 3, 4 and 9), and the environment it gets.

use super::*;
use crate::Bash;
use serde_json::json;
use spool_engine::{Tool, ToolContext, ToolOutput};
use tokio_util::sync::CancellationToken;

/// A project, a data dir and a directory outside both, in one temp dir.
struct Dirs {
    _dir: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    outside: PathBuf,
}

fn dirs() -> Dirs {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = dir.path().canonicalize().expect("canonical");
    let (root, data, outside) = (base.join("project"), base.join("data"), base.join("outside"));
    for d in [&root, &data, &outside] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    Dirs { _dir: dir, root, data, outside }
}

async fn bash(settings: SandboxSettings, dirs: &Dirs, command: &str) -> ToolOutput {
    let ctx = ToolContext {
        root: dirs.root.clone(),
        root_id: None,
        cancel: CancellationToken::new(),
        data_dir: Some(dirs.data.clone()),
        progress: Default::default(),
        asker: Default::default(),
        sampler: Default::default(),
    };
    Bash::new(settings).call(json!({ "command": command }), &ctx).await
}

/// Whether this kernel's Landlock judges TCP (ABI 4+); the tests that need it say
/// "skipped" without.
fn landlock_net() -> bool {
    let status = probe(&SandboxSettings::default());
    let on = status.landlock && status.abi >= 4;
    if !on {
        eprintln!("skipped: this kernel's Landlock does not handle TCP (ABI {})", status.abi);
    }
    on
}

fn landlock() -> bool {
    let on = probe(&SandboxSettings::default()).landlock;
    if !on {
        eprintln!("skipped: this kernel has no Landlock");
    }
    on
}

/// A Python one-liner that runs `body` and prints `NAME open` or `NAME refused`.
fn python(name: &str, body: &str) -> String {
    format!(
        "python3 -c 'import socket, ctypes\n{body}' >/dev/null 2>&1 && echo '{name} open' || echo '{name} refused'; "
    )
}

/// Issue 35, point 3: with the network on a command connected to the store and the bus.
/// Their ports are closed, by plain TCP, by TCP Fast Open (`sendto` connects) and by
/// MPTCP (which Landlock's port rules do not see, measured on Linux 6.18), while a
/// port of no service stays open.
#[tokio::test]
async fn the_services_ports_are_closed_and_other_ports_stay_open() {
    if !landlock_net() {
        return;
    }
    let dirs = dirs();
    let service = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let (service, other) = (service.local_addr().expect("addr").port(), other.local_addr().expect("addr").port());
    let settings = SandboxSettings {
        services: vec![Service::Tcp { host: "127.0.0.1".into(), port: service }],
        ..SandboxSettings::default()
    };
    let command = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{service}) 2>/dev/null && echo 'service open' || echo 'service refused'; \
         (exec 3<>/dev/tcp/127.0.0.1/{other}) 2>/dev/null && echo 'other open' || echo 'other refused'; {}{}",
        python(
            "mptcp",
            &format!("socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect((\"127.0.0.1\", {service}))")
        ),
        python("fastopen", &format!("socket.socket().sendto(b\"x\", socket.MSG_FASTOPEN, (\"127.0.0.1\", {service}))")),
    );
    let out = bash(settings, &dirs, &command).await;
    for line in ["service refused", "other open", "mptcp refused", "fastopen refused"] {
        assert!(out.text.contains(line), "expected {line:?}: {}", out.text);
    }
}

/// Issue 35, point 3 (the socket half): the PostgreSQL socket connected. No UNIX socket
/// can be made now, with the network on or off; a socket pair (no name, no one else on
/// the other end) still can.
#[tokio::test]
async fn unix_sockets_cannot_be_made_but_socket_pairs_can() {
    let dirs = dirs();
    let path = dirs.outside.join("service.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind a UNIX socket");
    let command = format!(
        "{}{}",
        python("unix", &format!("socket.socket(socket.AF_UNIX).connect(\"{}\")", path.display())),
        python("pair", "a, b = socket.socketpair(); a.send(b\"x\"); assert b.recv(1) == b\"x\""),
    );
    let out = bash(SandboxSettings::default(), &dirs, &command).await;
    assert!(out.text.contains("unix refused"), "{}", out.text);
    assert!(out.text.contains("pair open"), "{}", out.text);
}

/// Issue 35, point 9: with `network = false` a UDP datagram went out and a UNIX socket
/// connected.
#[tokio::test]
async fn with_network_off_udp_and_unix_sockets_are_closed() {
    let dirs = dirs();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = udp.local_addr().expect("addr").port();
    let path = dirs.outside.join("service.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind a UNIX socket");
    let settings = SandboxSettings { network: false, ..SandboxSettings::default() };
    let command = format!(
        "{}{}{}",
        python(
            "udp",
            &format!("socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {port}))")
        ),
        python("udp6", &format!("socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b\"x\", (\"::1\", {port}))")),
        python("unix", &format!("socket.socket(socket.AF_UNIX).connect(\"{}\")", path.display())),
    );
    let out = bash(settings, &dirs, &command).await;
    for line in ["udp refused", "udp6 refused", "unix refused"] {
        assert!(out.text.contains(line), "expected {line:?}: {}", out.text);
    }
    udp.set_nonblocking(true).expect("nonblocking");
    assert!(udp.recv(&mut [0u8; 8]).is_err(), "a datagram arrived");
}

/// The filter's own corners: an io_uring ring (which makes sockets without `socket()`)
/// cannot be set up, and on x86-64 an x32 system call is refused rather than judged by
/// the wrong numbers.
#[tokio::test]
async fn io_uring_and_foreign_system_call_entries_are_refused() {
    let dirs = dirs();
    let libc = "l = ctypes.CDLL(None, use_errno=True)\n";
    let mut command = python(
        "io_uring",
        &format!("{libc}p = ctypes.create_string_buffer(120)\nassert l.syscall(425, 4, p) >= 0, ctypes.get_errno()"),
    );
    if cfg!(target_arch = "x86_64") {
        // x32's getpid: 0x40000000 + 39.
        command += &python("x32", &format!("{libc}assert l.syscall(0x40000027) >= 0"));
    }
    let out = bash(SandboxSettings::default(), &dirs, &command).await;
    assert!(out.text.contains("io_uring refused"), "{}", out.text);
    if cfg!(target_arch = "x86_64") {
        assert!(out.text.contains("x32 refused"), "{}", out.text);
    }
}

/// Issue 35, point 4: a command read the server's TLS key and a config file kept
/// outside the data directory, and, under a root server, `/etc/shadow`. Secret paths are
/// as closed as the data directory now; the files beside them stay readable and the
/// directories holding them can still be listed.
#[tokio::test]
async fn secret_paths_are_as_closed_as_the_data_directory() {
    if !landlock() {
        return;
    }
    let dirs = dirs();
    let (key, cert, notes) = (dirs.outside.join("key.pem"), dirs.outside.join("cert.pem"), dirs.outside.join("n.txt"));
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").expect("write");
    std::fs::write(&cert, "-----BEGIN CERTIFICATE-----\n").expect("write");
    std::fs::write(&notes, "readable beside them\n").expect("write");
    let creds = dirs.outside.join("credentials");
    std::fs::create_dir(&creds).expect("mkdir");
    std::fs::write(creds.join("db-url"), "postgres://spool:hunter2@db/spool\n").expect("write");
    let settings = SandboxSettings {
        secret_paths: vec![key.clone(), creds.clone(), dirs.outside.join("not-there")],
        ..SandboxSettings::default()
    };
    let command = format!(
        "cat {key}; cat {creds}/db-url; cat {cert} {notes}; ls {outside}; cat /etc/shadow; head -n 1 /etc/passwd; \
         ln {key} hard.pem; ln -s {key} soft.pem; cat hard.pem soft.pem; ln /etc/shadow shadow; cat shadow",
        key = key.display(),
        creds = creds.display(),
        cert = cert.display(),
        notes = notes.display(),
        outside = dirs.outside.display()
    );
    let out = bash(settings, &dirs, &command).await;
    // Neither directly nor through a link made in the project (Landlock refuses a link
    // that would give the file more rights than it has where it is).
    assert!(!out.text.contains("PRIVATE KEY"), "the key was read: {}", out.text);
    assert!(!out.text.contains("hunter2"), "the credentials were read: {}", out.text);
    assert!(out.text.contains("BEGIN CERTIFICATE") && out.text.contains("readable beside them"), "{}", out.text);
    assert!(out.text.contains("key.pem\n") && out.text.contains("n.txt\n"), "the directory lists: {}", out.text);
    if Path::new("/etc/shadow").exists() {
        assert!(out.text.contains("/etc/shadow: Permission denied"), "{}", out.text);
        assert!(!out.text.contains("root:*:") && !out.text.contains("root:$"), "{}", out.text);
    }
    assert!(out.text.contains("root:x:0:0"), "/etc/passwd stays readable: {}", out.text);
}

/// A secret inside the project cannot be taken out of the project's read-write grant,
/// so such a project runs no command, and says why.
#[tokio::test]
async fn a_project_holding_a_secret_file_runs_no_command() {
    let dirs = dirs();
    let key = dirs.root.join("key.pem");
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\n").expect("write");
    let settings = SandboxSettings { secret_paths: vec![key.clone()], ..SandboxSettings::default() };
    let out = bash(settings, &dirs, "echo ran > ran.txt").await;
    assert!(out.is_error, "{}", out.text);
    assert!(out.text.contains("refusing to run") && out.text.contains(&key.display().to_string()), "{}", out.text);
    assert!(!dirs.root.join("ran.txt").exists());
}

#[test]
fn the_environment_is_an_allow_list_with_a_private_tmpdir() {
    let temp = Path::new("/tmp/spool-bash-test");
    let settings = SandboxSettings { env: vec!["CARGO_HOME".into()], ..SandboxSettings::default() };
    let env = environment(&settings, &[], temp);
    let names: Vec<&str> = env.iter().filter_map(|(k, _)| k.to_str()).collect();
    assert!(names.contains(&"PATH"));
    assert!(names.iter().all(|n| BASE_ENV.contains(n) || n.starts_with("LC_") || *n == "TMPDIR" || *n == "CARGO_HOME"));
    assert_eq!(env.iter().filter(|(k, _)| k == "TMPDIR").count(), 1);
    assert!(env.contains(&("TMPDIR".into(), temp.as_os_str().to_owned())));
}
