//! The configuration the Kubernetes manifests give their pods is one the
//! `plexus` command accepts: each ConfigMap's `plexus.toml`, with the
//! `PLEXUS_*` variables each pod template sets (Secrets as stand-in
//! values, `$(POD_IP)` and friends as a pod's), loads through the same
//! layering a pod uses and passes every check. A key in the wrong
//! section or a value out of range would stop every pod at start.

use std::path::PathBuf;

use plexus::config::Config;
use serde_norway::Value;

fn manifests() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn documents(file: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(file).expect("read");
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
        .collect()
}

/// A pod's value for an env entry: literal values with the downward API's
/// variables filled in, Secrets as stand-ins.
fn pod_value(entry: &Value) -> String {
    match entry["value"].as_str() {
        Some(v) => v
            .replace("$(POD_IP)", "10.0.0.7")
            .replace("$(POD_NAME)", "plexus-0")
            .replace("$(POD_NAMESPACE)", "default"),
        None => "stand-in-secret-value-0123456789".to_owned(),
    }
}

#[test]
#[allow(clippy::result_large_err)] // figment's own error type, in its own harness
fn every_pod_template_loads_its_config_map_as_a_pod_does() {
    let config_map = |docs: &[Value]| {
        docs.iter()
            .find(|d| d["kind"] == "ConfigMap")
            .and_then(|d| d["data"]["plexus.toml"].as_str().map(str::to_owned))
    };
    // An application's Deployment mounts the plain cluster's ConfigMap.
    let shared = manifests()
        .iter()
        .find(|f| f.ends_with("plexus-cluster.yaml"))
        .and_then(|f| config_map(&documents(f)))
        .expect("plexus-cluster.yaml has the ConfigMap");
    let mut checked = 0;
    for file in manifests() {
        let docs = documents(&file);
        let toml = config_map(&docs).unwrap_or_else(|| shared.clone());
        let toml = toml.as_str();
        for workload in docs
            .iter()
            .filter(|d| matches!(d["kind"].as_str(), Some("StatefulSet" | "Deployment")))
        {
            let containers = workload["spec"]["template"]["spec"]["containers"]
                .as_sequence()
                .expect("containers");
            let vars: Vec<(String, String)> = containers[0]["env"]
                .as_sequence()
                .into_iter()
                .flatten()
                .filter_map(|e| {
                    let name = e["name"].as_str()?;
                    name.starts_with("PLEXUS_")
                        .then(|| (name.to_owned(), pod_value(e)))
                })
                .collect();
            let name = file.display().to_string();
            figment::Jail::expect_with(|jail| {
                jail.create_file("plexus.toml", toml)?;
                for (k, v) in &vars {
                    jail.set_env(k, v);
                }
                let mut config =
                    Config::load(&["plexus.toml"]).map_err(|e| format!("{name}: {e}"))?;
                // The StatefulSets give the listen address as a flag.
                if config.node.listen == Config::default().node.listen {
                    config.node.listen = vec!["tcp://10.0.0.7:4000".to_owned()];
                }
                config.validate().map_err(|e| format!("{name}: {e}"))?;
                assert!(
                    !config.management.bind.ip().is_loopback(),
                    "{name}: probes come from outside the pod"
                );
                assert!(config.management.token.is_some(), "{name}: a token");
                Ok(())
            });
            checked += 1;
        }
    }
    assert!(checked >= 3, "pod templates checked: {checked}");
}
