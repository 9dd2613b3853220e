//! `plexus data --store` refuses a store it cannot use with exit code
//! 2 and one readable line naming the file, before it listens; it creates
//! one only with `--create-store`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bytes::Bytes;
use plexus_data::replicator::StoreBatch;
use plexus_data::store::{DurableStore, OpenMode};

mod common;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("plexus-store-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A member on 127.0.0.1 keeping `d/*` durable in `store`, with `extra`
/// flags.
fn member(store: &Path, extra: &[&str]) -> Command {
    let mut command = common::plexus("data");
    command
        .args([
            "--listen",
            "tcp://127.0.0.1:0",
            "--durable",
            "d/*",
            "--store",
        ])
        .arg(store)
        .args(extra)
        .stdin(Stdio::null());
    command
}

/// Runs the member on `store` (with `extra` flags) to its end: it must
/// end by itself, since it refuses the store before it listens.
fn refused(store: &Path, extra: &[&str]) -> Output {
    member(store, extra).output().expect("runs plexus data")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_damaged_store_exits_2_with_a_line_naming_the_file() {
    let path = dir("damaged").join("m0.redb");
    {
        let store = DurableStore::open(&path, OpenMode::CreateIfMissing).unwrap();
        for id in 0..20u64 {
            let records = (0..20)
                .map(|i| (format!("d/{i}").into(), Bytes::from(vec![id as u8; 64])))
                .collect();
            store.write(&StoreBatch { id, records }).unwrap();
        }
    }
    // Every page after the header zeroed: the header names pages that hold
    // nothing now.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096..].fill(0);
    std::fs::write(&path, &bytes).unwrap();

    let out = refused(&path, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&*path.to_string_lossy()), "{err}");
    assert!(err.contains("damaged"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty(), "it listened: {:?}", out.stdout);
}

#[test]
fn a_missing_or_empty_store_exits_2_unless_creation_is_asked() {
    let d = dir("missing");
    let missing = d.join("missing.redb");
    let out = refused(&missing, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no such file"), "{err}");
    assert!(err.contains("--create-store"), "{err}");
    assert!(!missing.exists());

    let empty = d.join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let out = refused(&empty, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("empty (0 bytes)"), "{err}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
}

#[test]
fn a_file_that_is_not_a_store_exits_2_even_with_create_store() {
    let path = dir("text").join("notes.txt");
    std::fs::write(&path, "not a store\n".repeat(1000)).unwrap();
    let out = refused(&path, &["--create-store"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a Plexus store"), "{err}");
}

#[test]
fn create_store_starts_a_member_with_a_new_store() {
    let path = dir("create").join("m0.redb");
    let mut child = member(&path, &["--create-store"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("runs plexus data");
    let stdout = child.stdout.take().expect("piped");
    let first = BufReader::new(stdout).lines().next();
    child.kill().expect("kills it");
    child.wait().expect("reaps it");
    let first = first.expect("a line").expect("readable");
    assert!(first.starts_with("LISTENING "), "{first}");
    // A store now, opened without asking to create (after the SIGKILL).
    let store = DurableStore::open(&path, OpenMode::Existing).unwrap();
    assert!(store.load().unwrap().is_empty());
}
