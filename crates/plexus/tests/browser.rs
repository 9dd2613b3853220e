//! The demo's web site (`examples/demo/web.rs`) in headless Chromium: the
//! page an actor serves loads, its stylesheet comes from the static files,
//! and its script's request to another actor fills the page.

#[allow(dead_code)] // the demo's tour is not run here
#[path = "../../../examples/demo/web.rs"]
mod web;

use plexus::ActorSystem;

/// Chromium from Debian's package, or on PATH.
fn chromium() -> std::path::PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| "chromium".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium"]
async fn the_demo_page_renders_in_chromium_and_its_script_asks_an_actor() {
    let system = ActorSystem::new();
    let dir = std::env::temp_dir().join(format!("plexus-browser-{}", std::process::id()));
    let addr = web::site(&system, &dir)
        .unwrap()
        .listen("127.0.0.1:0")
        .await
        .unwrap();
    let profile = dir.join("profile");
    let url = format!("http://{addr}/");
    // --dump-dom prints the DOM once the page has loaded and its scripts
    // have run (virtual time lets the fetch finish first).
    let output = tokio::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .await
        .expect("run chromium (apt-get install chromium)");
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        dom.contains("<h1>hello from an actor</h1>"),
        "{}\n{dom}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The script's fetch reached the counting actor and wrote its answer.
    assert!(dom.contains(r#"<p id="visits">visits: 1</p>"#), "{dom}");
    let _ = std::fs::remove_dir_all(&dir);
}
