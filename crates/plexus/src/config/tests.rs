use super::*;

#[test]
fn the_reference_is_the_defaults_and_names_every_key() {
    let reference = Config::from_toml(REFERENCE).expect("the reference parses");
    assert_eq!(reference, Config::default());
    let shown: toml::Table = toml::from_str(REFERENCE).expect("TOML");
    let defaults: toml::Table = toml::from_str(&Config::default().to_toml()).expect("TOML");
    let mut missing = Vec::new();
    keys_missing(&defaults, &shown, "", &mut missing);
    assert!(
        missing.is_empty(),
        "keys not in reference.toml: {missing:?}"
    );
}

fn keys_missing(want: &toml::Table, have: &toml::Table, at: &str, missing: &mut Vec<String>) {
    for (key, value) in want {
        let path = format!("{at}{key}");
        match (value, have.get(key)) {
            (toml::Value::Table(w), Some(toml::Value::Table(h))) => {
                keys_missing(w, h, &format!("{path}."), missing)
            }
            (_, Some(_)) => {}
            (_, None) => missing.push(path),
        }
    }
}

#[test]
fn a_file_changes_only_what_it_names_in_human_units() {
    let c = Config::from_toml(
        "[cluster]\nprobe_interval = \"250ms\"\nmax_packet = \"2KiB\"\n\
         split_brain = \"static-quorum=2\"\n[data]\nmax_round_bytes = \"8 MiB\"\n",
    )
    .expect("valid");
    assert_eq!(
        c.cluster.probe_interval,
        std::time::Duration::from_millis(250)
    );
    assert_eq!(c.cluster.max_packet, 2048);
    assert_eq!(
        c.cluster.split_brain,
        plexus_cluster::SplitBrainStrategy::StaticQuorum { size: 2 }
    );
    assert_eq!(c.data.max_round_bytes, 8 << 20);
    assert_eq!(
        c.cluster.gossip_interval,
        Config::default().cluster.gossip_interval
    );
}

#[test]
fn an_unknown_key_is_refused_with_its_path_and_the_nearest_key() {
    let e = Config::from_toml("[cluster]\nprobe_intervall = \"1s\"\n").expect_err("unknown");
    match &e {
        ConfigError::UnknownKey { path, nearest, .. } => {
            assert_eq!(path, "cluster.probe_intervall");
            assert_eq!(nearest.as_deref(), Some("cluster.probe_interval"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .contains("did you mean `cluster.probe_interval`?"),
        "{e}"
    );
    let e = Config::from_toml("[clustr]\nname = \"x\"\n").expect_err("unknown section");
    match &e {
        ConfigError::UnknownKey { path, nearest, .. } => {
            assert_eq!(path, "clustr");
            assert_eq!(nearest.as_deref(), Some("cluster"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_toml_is_refused_with_line_and_column() {
    let e = Config::from_toml("[cluster]\nname = \"a\nseeds = []\n").expect_err("malformed");
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e:?}");
    assert!(e.to_string().contains("line 2"), "{e}");
    assert!(e.to_string().contains("column"), "{e}");
}

#[test]
fn wrong_types_and_values_out_of_range_name_the_key_and_what_is_allowed() {
    let e = Config::from_toml("[cluster]\nprobe_interval = 200\n").expect_err("a bare number");
    match &e {
        ConfigError::Invalid { path, message, .. } => {
            assert_eq!(path, "cluster.probe_interval");
            assert!(message.contains("duration"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let e = Config::from_toml("[cluster]\nsplit_brain = \"keep-most\"\n").expect_err("no such");
    assert!(e.to_string().contains("cluster.split_brain"), "{e}");
    assert!(e.to_string().contains("keep-majority"), "{e}");
    let e = Config::from_toml("[management]\nbind = \"localhost\"\n").expect_err("no port");
    assert!(e.to_string().contains("management.bind"), "{e}");
    let e = Config::from_toml("[cluster]\nsuspicion_mult = 0.0\n")
        .expect("parses")
        .finish()
        .expect_err("out of range");
    assert!(e.to_string().contains("cluster.suspicion_mult"), "{e}");
    assert!(e.to_string().contains("above 0"), "{e}");
    let e = Config::from_toml("[data]\nbuckets = 0\n")
        .expect("parses")
        .finish()
        .expect_err("out of range");
    assert!(e.to_string().contains("data.buckets"), "{e}");
    assert!(e.to_string().contains("1 to 1,048,576"), "{e}");
}

#[test]
fn the_default_cookie_is_refused_off_loopback() {
    for listen in ["tcp://127.0.0.1:0", "udp://[::1]:4000", "tcp://localhost:1"] {
        let c = Config::from_toml(&format!("[node]\nlisten = [\"{listen}\"]\n")).expect("valid");
        c.finish().expect("loopback with the default cookie");
    }
    let c = Config::from_toml("[node]\nlisten = [\"tcp://0.0.0.0:4000\"]\n").expect("valid");
    let e = c
        .clone()
        .finish()
        .expect_err("default cookie on every address");
    assert!(matches!(e, ConfigError::DefaultCookie { .. }), "{e:?}");
    assert!(e.to_string().contains("PLEXUS_NODE__COOKIE"), "{e}");
    let mut c = c;
    c.node.cookie = "a-real-secret".into();
    c.finish().expect("a cookie of one's own");
}

#[test]
fn secrets_come_from_files_and_a_missing_one_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("cookie");
    std::fs::write(&file, "s3cret-cookie\n").expect("write");
    let c = Config::from_toml(&format!(
        "[node]\nlisten = [\"tcp://0.0.0.0:4000\"]\ncookie_file = {:?}\n",
        file.display().to_string()
    ))
    .expect("valid")
    .finish()
    .expect("the cookie from its file");
    assert_eq!(c.node.cookie, "s3cret-cookie");
    let missing = dir.path().join("nope");
    let e = Config::from_toml(&format!(
        "[management]\ntoken_file = {:?}\n",
        missing.display().to_string()
    ))
    .expect("valid")
    .finish()
    .expect_err("no such file");
    assert!(
        matches!(
            e,
            ConfigError::Secret {
                key: "management.token_file",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
// figment's own error type, in its own test harness.
#[allow(clippy::result_large_err)]
fn layers_files_in_order_then_the_environment() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "a.toml",
            "[cluster]\nname = \"a\"\nprobe_interval = \"2s\"\n",
        )?;
        jail.create_file("b.toml", "[cluster]\nname = \"b\"\n")?;
        jail.set_env("PLEXUS_CLUSTER__PROBE_INTERVAL", "300ms");
        // Not configuration: no section separator.
        jail.set_env("PLEXUS_SIM_SEED", "7");
        let c = Config::load(&["a.toml", "b.toml"]).map_err(|e| e.to_string())?;
        assert_eq!(c.cluster.name, "b");
        assert_eq!(
            c.cluster.probe_interval,
            std::time::Duration::from_millis(300)
        );
        // One URI for a list, and a key of a nested table.
        jail.set_env("PLEXUS_NODE__LISTEN", "tcp://127.0.0.1:4000");
        jail.set_env("PLEXUS_NODE__TLS__CERT", "n.pem");
        jail.set_env("PLEXUS_NODE__TLS__KEY", "n.key");
        jail.set_env("PLEXUS_NODE__TLS__CA", "ca.pem");
        let c = Config::load(&["a.toml"]).map_err(|e| e.to_string())?;
        assert_eq!(c.node.listen, ["tcp://127.0.0.1:4000"]);
        assert_eq!(
            c.node.tls.map(|t| t.key),
            Some(std::path::PathBuf::from("n.key"))
        );
        jail.set_env("PLEXUS_CLUSTER__PROBE_INTERVALL", "300ms");
        let e = Config::load(&["a.toml"]).expect_err("unknown key from the environment");
        let text = e.to_string();
        assert!(text.contains("PLEXUS_CLUSTER__PROBE_INTERVALL"), "{text}");
        assert!(
            text.contains("did you mean `cluster.probe_interval`"),
            "{text}"
        );
        let e = Config::load(&["missing.toml"]).expect_err("a file that is not there");
        assert!(matches!(e, ConfigError::Read { .. }), "{e:?}");
        Ok(())
    });
}
